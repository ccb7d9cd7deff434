#include "kernels/cuda/common.hpp"
#include "ops/metrics/cuda.hpp"

namespace memfit::kernels::cuda {
namespace {

// row[3 r + {0, 1, 2}]: row r's loss, whether it is correct, whether it counts.
__global__ void rows_k(MetricsParams p, const float* z, const int32_t* labels, double* row) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < p.R; r += int64_t(gridDim.x) * blockDim.x) {
    double* o = row + 3 * r;
    const int32_t y = labels[r];
    if (y < 0) {
      o[0] = o[1] = o[2] = 0.0;
      continue;
    }
    const float* zr = z + r * p.C;
    int64_t best = 0;
    for (int64_t c = 1; c < p.C; ++c)
      if (zr[c] > zr[best]) best = c;
    const double m = static_cast<double>(zr[best]);
    double s = 0;
    for (int64_t c = 0; c < p.C; ++c) s += exp(static_cast<double>(zr[c]) - m);
    o[2] = 1.0;
    o[0] = y >= p.C ? NAN : log(s) + m - static_cast<double>(zr[y]);
    o[1] = y < p.C && best == y ? 1.0 : 0.0;
  }
}

__global__ void sum_k(const double* row, int64_t R, float* loss, float* correct, float* count) {
  double l = 0, c = 0, n = 0;
  for (int64_t r = 0; r < R; ++r) {
    l += row[3 * r];
    c += row[3 * r + 1];
    n += row[3 * r + 2];
  }
  *loss = static_cast<float>(l);
  *correct = static_cast<float>(c);
  *count = static_cast<float>(n);
}

class XentMetrics final : public Kernel {
 public:
  explicit XentMetrics(MetricsParams p) : p_(p) {}
  const char* name() const override { return "cuda.xent_metrics"; }
  size_t scratch_bytes() const override { return static_cast<size_t>(3 * p_.R) * sizeof(double); }
  void run(const StepContext& ctx) override {
    const cudaStream_t s = queue(ctx);
    double* row = static_cast<double*>(scratch_);
    rows_k<<<blocks_for(p_.R), kThreads, 0, s>>>(p_, in<float>(0), in<int32_t>(1), row);
    sum_k<<<1, 1, 0, s>>>(row, p_.R, out<float>(0), out<float>(1), out<float>(2));
    check(cudaGetLastError(), name());
  }

 private:
  MetricsParams p_;
};

}  // namespace

std::unique_ptr<Kernel> xent_metrics(const MetricsParams& p) { return std::make_unique<XentMetrics>(p); }

}  // namespace memfit::kernels::cuda
