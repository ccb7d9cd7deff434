#include <cmath>

#include "kernels/cuda/common.hpp"
#include "ops/batchnorm/cuda.hpp"

namespace memfit::kernels::cuda {
namespace {

// Each channel's n = N*HW values are split over S blocks (parts of the
// batch), so that small channel counts still fill the GPU: every block
// reduces its part in a fixed tree into the scratch, a per-channel pass adds
// the S parts in order (the same bits every run), and an element-wise pass
// applies the result.
constexpr int kTargetBlocks = 1024;

int64_t splits(const BatchNormParams& p) {
  const int64_t s = (kTargetBlocks + p.C - 1) / p.C;
  return s < 1 ? 1 : (s > p.N ? p.N : s);
}

// The block's sums of a and b (every thread's parts), in a fixed tree;
// thread 0 gets them. s holds 2 kThreads doubles.
__device__ void block_sums(double& a, double& b, double* s) {
  s[threadIdx.x] = a;
  s[kThreads + threadIdx.x] = b;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) {
      s[threadIdx.x] += s[threadIdx.x + w];
      s[kThreads + threadIdx.x] += s[kThreads + threadIdx.x + w];
    }
    __syncthreads();
  }
  a = s[0];
  b = s[kThreads];
}

// Block (c, part): batches [N part / S, N (part+1) / S) of channel c. f(i)
// is called with the flat index of each of its elements.
template <class F>
__device__ void for_part(const BatchNormParams& p, int64_t c, int64_t part, int64_t S, F f) {
  const int64_t b0 = p.N * part / S, b1 = p.N * (part + 1) / S;
  const uint32_t hw = static_cast<uint32_t>(p.HW), m = static_cast<uint32_t>((b1 - b0) * p.HW);
  for (uint32_t j = threadIdx.x; j < m; j += blockDim.x) f(((b0 + j / hw) * p.C + c) * p.HW + j % hw);
}

// Forward, pass 1: per (c, part) the sums of d and d^2, d = x - x[c's first element]
// (the shift keeps E[d^2] - E[d]^2 accurate in double).
__global__ void bn_sums_k(BatchNormParams p, int64_t S, const float* x, double* part_sums) {
  __shared__ double s[2 * kThreads];
  const int64_t c = blockIdx.x / S, part = blockIdx.x % S;
  const double shift = static_cast<double>(x[c * p.HW]);
  double a = 0, b = 0;
  for_part(p, c, part, S, [&](int64_t i) {
    const double d = static_cast<double>(x[i]) - shift;
    a += d;
    b += d * d;
  });
  block_sums(a, b, s);
  if (threadIdx.x == 0) {
    part_sums[2 * blockIdx.x] = a;
    part_sums[2 * blockIdx.x + 1] = b;
  }
}

// Forward, pass 2, one thread per channel: the statistics, the running
// statistics, and y = (x - mean) scale + beta's coefficients: coef[2c] =
// scale, coef[2c+1] = beta, coef[2C+c] = mean.
__global__ void bn_stats_k(BatchNormParams p, int64_t S, const float* x, const double* part_sums, const float* gamma,
                           const float* beta, float* rm, float* rv, float* mean_out, float* var_out, double* coef) {
  const double n = static_cast<double>(p.N * p.HW);
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < p.C; c += int64_t(gridDim.x) * blockDim.x) {
    double mean, var;
    if (p.training) {
      double a = 0, b = 0;
      for (int64_t k = 0; k < S; ++k) {
        a += part_sums[2 * (c * S + k)];
        b += part_sums[2 * (c * S + k) + 1];
      }
      const double md = a / n;
      mean = static_cast<double>(x[c * p.HW]) + md;
      var = b / n - md * md;
      if (var < 0) var = 0;
      if (p.update_stats) {
        const double m = p.momentum;
        rm[c] = static_cast<float>((1.0 - m) * static_cast<double>(rm[c]) + m * mean);
        rv[c] = static_cast<float>((1.0 - m) * static_cast<double>(rv[c]) + m * var * n / (n - 1.0));
      }
    } else {
      mean = static_cast<double>(rm[c]);
      var = static_cast<double>(rv[c]);
    }
    mean_out[c] = static_cast<float>(mean);
    var_out[c] = static_cast<float>(var);
    const double scale = static_cast<double>(gamma[c]) / sqrt(var + p.eps);
    coef[2 * c] = scale;
    coef[2 * c + 1] = static_cast<double>(beta[c]);
    coef[2 * p.C + c] = mean;
  }
}

__global__ void bn_apply_k(BatchNormParams p, const float* x, const double* coef, float* y) {
  const int64_t total = p.N * p.C * p.HW;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i / p.HW % p.C;
    // (x - mean) scale + beta, as the reference computes it.
    y[i] = static_cast<float>((static_cast<double>(x[i]) - coef[2 * p.C + c]) * coef[2 * c] + coef[2 * c + 1]);
  }
}

// Backward, pass 1: per (c, part) the sums of dy and dy xhat.
__global__ void bn_bwd_sums_k(BatchNormParams p, int64_t S, const float* x, const float* dy, const float* mean_in,
                              const float* var_in, double* part_sums) {
  __shared__ double s[2 * kThreads];
  const int64_t c = blockIdx.x / S, part = blockIdx.x % S;
  const double mean = static_cast<double>(mean_in[c]);
  const double invstd = 1.0 / sqrt(static_cast<double>(var_in[c]) + p.eps);
  double a = 0, b = 0;
  for_part(p, c, part, S, [&](int64_t i) {
    const double g = static_cast<double>(dy[i]);
    a += g;
    b += g * (static_cast<double>(x[i]) - mean) * invstd;
  });
  block_sums(a, b, s);
  if (threadIdx.x == 0) {
    part_sums[2 * blockIdx.x] = a;
    part_sums[2 * blockIdx.x + 1] = b;
  }
}

// Backward, pass 2, one thread per channel: dbeta, dgamma and the
// coefficients of dx = gs (dy - mdy - xhat mdyx): coef[4c..4c+3] = gs, mdy,
// mdyx, invstd.
__global__ void bn_bwd_stats_k(BatchNormParams p, int64_t S, const double* part_sums, const float* gamma,
                               const float* var_in, float* dgamma, float* dbeta, double* coef) {
  const double n = static_cast<double>(p.N * p.HW);
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < p.C; c += int64_t(gridDim.x) * blockDim.x) {
    double a = 0, b = 0;
    for (int64_t k = 0; k < S; ++k) {
      a += part_sums[2 * (c * S + k)];
      b += part_sums[2 * (c * S + k) + 1];
    }
    dbeta[c] = static_cast<float>(a);
    dgamma[c] = static_cast<float>(b);
    const double invstd = 1.0 / sqrt(static_cast<double>(var_in[c]) + p.eps);
    coef[4 * c] = static_cast<double>(gamma[c]) * invstd;
    coef[4 * c + 1] = p.training ? a / n : 0.0;
    coef[4 * c + 2] = p.training ? b / n : 0.0;
    coef[4 * c + 3] = invstd;
  }
}

__global__ void bn_bwd_apply_k(BatchNormParams p, const float* x, const float* dy, const float* mean_in,
                               const double* coef, float* dx) {
  const int64_t total = p.N * p.C * p.HW;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i / p.HW % p.C;
    const double* k = coef + 4 * c;
    const double xhat = (static_cast<double>(x[i]) - static_cast<double>(mean_in[c])) * k[3];
    dx[i] = static_cast<float>(k[0] * (static_cast<double>(dy[i]) - k[1] - xhat * k[2]));
  }
}

class BatchNorm final : public Kernel {
 public:
  BatchNorm(BatchNormParams p, bool bwd) : p_(p), bwd_(bwd), S_(splits(p)) {}
  const char* name() const override { return bwd_ ? "cuda.batch_norm_bwd" : "cuda.batch_norm"; }
  // The blocks' partial sums (2 per block) and the per-channel coefficients (4 per channel).
  size_t scratch_bytes() const override { return static_cast<size_t>(2 * p_.C * S_ + 4 * p_.C) * sizeof(double); }
  void run(const StepContext& ctx) override {
    const cudaStream_t s = queue(ctx);
    double* part = static_cast<double*>(scratch_);
    double* coef = part + 2 * p_.C * S_;
    const unsigned blocks = static_cast<unsigned>(p_.C * S_), channels = blocks_for(p_.C);
    const unsigned elems = blocks_for(p_.N * p_.C * p_.HW);
    if (bwd_) {
      bn_bwd_sums_k<<<blocks, kThreads, 0, s>>>(p_, S_, in<float>(0), in<float>(1), in<float>(3), in<float>(4), part);
      bn_bwd_stats_k<<<channels, kThreads, 0, s>>>(p_, S_, part, in<float>(2), in<float>(4), out<float>(1),
                                                   out<float>(2), coef);
      bn_bwd_apply_k<<<elems, kThreads, 0, s>>>(p_, in<float>(0), in<float>(1), in<float>(3), coef, out<float>(0));
    } else {
      if (p_.training) bn_sums_k<<<blocks, kThreads, 0, s>>>(p_, S_, in<float>(0), part);
      bn_stats_k<<<channels, kThreads, 0, s>>>(p_, S_, in<float>(0), part, in<float>(1), in<float>(2), in<float>(3),
                                               in<float>(4), out<float>(1), out<float>(2), coef);
      bn_apply_k<<<elems, kThreads, 0, s>>>(p_, in<float>(0), coef, out<float>(0));
    }
    check(cudaGetLastError(), name());
  }

 private:
  BatchNormParams p_;
  bool bwd_;
  int64_t S_;
};

}  // namespace

std::unique_ptr<Kernel> batch_norm(const BatchNormParams& p) { return std::make_unique<BatchNorm>(p, false); }
std::unique_ptr<Kernel> batch_norm_bwd(const BatchNormParams& p) { return std::make_unique<BatchNorm>(p, true); }

}  // namespace memfit::kernels::cuda
