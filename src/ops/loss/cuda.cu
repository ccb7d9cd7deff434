#include "kernels/cuda/common.hpp"
#include "ops/loss/cuda.hpp"

namespace memfit::kernels::cuda {
namespace {

constexpr int kWarp = 32;

__device__ inline double warp_max(double v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ inline double warp_sum(double v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Row i's probabilities and its loss -sum_c q_c log p_c (into row_loss[i]).
__global__ void xent_rows_k(XentParams p, const float* z, const int32_t* labels, float* probs, double* row_loss) {
  const int64_t warps = int64_t(gridDim.x) * blockDim.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  for (int64_t i = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / kWarp; i < p.N; i += warps) {
    const float* zi = z + i * p.C;
    double mx = -INFINITY;
    for (int64_t c = lane; c < p.C; c += kWarp) mx = fmax(mx, static_cast<double>(zi[c]));
    mx = warp_max(mx);
    double sum = 0, shifted = 0;
    for (int64_t c = lane; c < p.C; c += kWarp) {
      const double d = static_cast<double>(zi[c]) - mx;
      sum += exp(d);
      shifted += d;
    }
    sum = warp_sum(sum);
    shifted = warp_sum(shifted);
    for (int64_t c = lane; c < p.C; c += kWarp) probs[i * p.C + c] = static_cast<float>(exp(static_cast<double>(zi[c]) - mx) / sum);
    if (lane == 0) {
      const double lse = log(sum), s = p.smoothing, C = static_cast<double>(p.C);
      const int32_t y = labels[i];
      row_loss[i] = (y < 0 || y >= p.C) ? NAN
                                        : (1.0 - s) * (lse - (static_cast<double>(zi[y]) - mx)) + s / C * (C * lse - shifted);
    }
  }
}

__global__ void mean_k(const double* row_loss, int64_t n, float* loss) {
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += row_loss[i];
  loss[0] = static_cast<float>(total / static_cast<double>(n));
}

__global__ void xent_bwd_k(XentParams p, const float* probs, const int32_t* labels, const float* dloss, float* dz) {
  const double g = static_cast<double>(dloss[0]) / static_cast<double>(p.N);
  const double on = 1.0 - p.smoothing, off = p.smoothing / static_cast<double>(p.C);
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < p.N * p.C; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = k / p.C, c = k % p.C;
    const int32_t y = labels[i];
    const double q = (c == y ? on : 0.0) + off;
    dz[k] = (y >= 0 && y < p.C) ? static_cast<float>((static_cast<double>(probs[k]) - q) * g) : NAN;
  }
}

class SoftmaxXent final : public Kernel {
 public:
  explicit SoftmaxXent(XentParams p) : p_(p) {}
  const char* name() const override { return "cuda.softmax_xent"; }
  size_t scratch_bytes() const override { return static_cast<size_t>(p_.N) * sizeof(double); }
  void run(const StepContext& ctx) override {
    const cudaStream_t s = queue(ctx);
    double* rows = static_cast<double*>(scratch_);
    xent_rows_k<<<blocks_for(p_.N * kWarp), kThreads, 0, s>>>(p_, in<float>(0), in<int32_t>(1), out<float>(1), rows);
    mean_k<<<1, 1, 0, s>>>(rows, p_.N, out<float>(0));
    check(cudaGetLastError(), name());
  }

 private:
  XentParams p_;
};

class SoftmaxXentBwd final : public Kernel {
 public:
  explicit SoftmaxXentBwd(XentParams p) : p_(p) {}
  const char* name() const override { return "cuda.softmax_xent_bwd"; }
  void run(const StepContext& ctx) override {
    xent_bwd_k<<<blocks_for(p_.N * p_.C), kThreads, 0, queue(ctx)>>>(p_, in<float>(0), in<int32_t>(1),
                                                                           in<float>(2), out<float>(0));
    check(cudaGetLastError(), name());
  }

 private:
  XentParams p_;
};

}  // namespace

std::unique_ptr<Kernel> softmax_xent(const XentParams& p) { return std::make_unique<SoftmaxXent>(p); }
std::unique_ptr<Kernel> softmax_xent_bwd(const XentParams& p) { return std::make_unique<SoftmaxXentBwd>(p); }

}  // namespace memfit::kernels::cuda
