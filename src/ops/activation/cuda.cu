#include "kernels/cuda/common.hpp"
#include "ops/activation/cuda.hpp"
#include "ops/activation/ref_formulas.hpp"

namespace memfit::kernels::cuda {
namespace {

using act_formulas::derivative;
using act_formulas::value;

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
  void run(const StepContext& ctx) override {
    const cudaStream_t s = queue(ctx);
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
