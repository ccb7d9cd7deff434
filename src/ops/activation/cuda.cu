#include "kernels/cuda/common.hpp"
#include "ops/activation/cuda.hpp"

namespace memfit::kernels::cuda {
namespace {

// The reference's formulas (ops/activation/ref.hpp, act_detail), in double.
// min and max as std::min and std::max are (not fmin/fmax, which drop a
// NaN): a NaN input stays NaN, as on the CPU.
__device__ inline double sig(double x) { return 1.0 / (1.0 + exp(-x)); }
__device__ inline double max_of(double a, double b) { return a < b ? b : a; }
__device__ inline double min_of(double a, double b) { return b < a ? b : a; }

__device__ double value(const ActivationParams& p, double x) {
  switch (p.kind) {
    case ActKind::Sigmoid: return sig(x);
    case ActKind::Tanh: return tanh(x);
    case ActKind::Silu: return x * sig(x);
    case ActKind::Clip: return min_of(max_of(x, p.a), p.b);
    case ActKind::HardSigmoid: return min_of(max_of(p.a * x + p.b, 0.0), 1.0);
    case ActKind::HardSwish: return x * min_of(max_of(x / 6.0 + 0.5, 0.0), 1.0);
    case ActKind::LeakyRelu: return x > 0.0 ? x : p.a * x;
    case ActKind::Elu: return x > 0.0 ? x : p.a * expm1(x);
  }
  return 0.0;
}

__device__ double derivative(const ActivationParams& p, double x) {
  switch (p.kind) {
    case ActKind::Sigmoid: return sig(x) * sig(-x);
    case ActKind::Tanh: return 4.0 * sig(2.0 * x) * sig(-2.0 * x);
    case ActKind::Silu: return sig(x) * (1.0 + x * sig(-x));
    case ActKind::Clip: return x > p.a && x < p.b ? 1.0 : 0.0;
    case ActKind::HardSigmoid: {
      const double u = p.a * x + p.b;
      return u > 0.0 && u < 1.0 ? p.a : 0.0;
    }
    case ActKind::HardSwish: return x < -3.0 ? 0.0 : x <= 3.0 ? x / 3.0 + 0.5 : 1.0;
    case ActKind::LeakyRelu: return x > 0.0 ? 1.0 : p.a;
    case ActKind::Elu: return x > 0.0 ? 1.0 : p.a * exp(x);
  }
  return 0.0;
}

__global__ void act_k(ActivationParams p, const float* x, float* y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < p.n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = static_cast<float>(value(p, static_cast<double>(x[i])));
}

__global__ void act_bwd_k(ActivationParams p, const float* x, const float* dy, float* dx) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < p.n; i += int64_t(gridDim.x) * blockDim.x)
    dx[i] = static_cast<float>(static_cast<double>(dy[i]) * derivative(p, static_cast<double>(x[i])));
}

class Activation final : public Kernel {
 public:
  Activation(ActivationParams p, bool bwd) : p_(p), bwd_(bwd) {}
  const char* name() const override { return bwd_ ? "cuda.activation_bwd" : "cuda.activation"; }
  void run(const StepContext&) override {
    const cudaStream_t s = context().stream;
    if (bwd_) act_bwd_k<<<blocks_for(p_.n), kThreads, 0, s>>>(p_, in<float>(0), in<float>(1), out<float>(0));
    else act_k<<<blocks_for(p_.n), kThreads, 0, s>>>(p_, in<float>(0), out<float>(0));
    check(cudaGetLastError(), name());
  }

 private:
  ActivationParams p_;
  bool bwd_;
};

}  // namespace

std::unique_ptr<Kernel> activation(const ActivationParams& p) { return std::make_unique<Activation>(p, false); }
std::unique_ptr<Kernel> activation_bwd(const ActivationParams& p) { return std::make_unique<Activation>(p, true); }

}  // namespace memfit::kernels::cuda
