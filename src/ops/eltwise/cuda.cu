#include "kernels/cuda/common.hpp"
#include "ops/eltwise/cuda.hpp"

namespace memfit::kernels::cuda {
namespace {

#define MEMFIT_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

__global__ void relu_k(const float* x, float* y, int64_t n) {
  MEMFIT_GRID_LOOP(i, n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
__global__ void relu_bwd_k(const float* y, const float* dy, float* dx, int64_t n) {
  MEMFIT_GRID_LOOP(i, n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}
__global__ void add_k(const float* a, const float* b, float* y, int64_t n) {
  MEMFIT_GRID_LOOP(i, n) y[i] = a[i] + b[i];
}
__global__ void scale_k(const float* x, float* y, float alpha, int64_t n) {
  MEMFIT_GRID_LOOP(i, n) y[i] = alpha * x[i];
}
__global__ void fill_k(float* y, float v, int64_t n) {
  MEMFIT_GRID_LOOP(i, n) y[i] = v;
}

enum class Op { Relu, ReluBwd, Add, Scale, Fill };

class Eltwise final : public Kernel {
 public:
  Eltwise(Op op, int64_t n, double a) : op_(op), n_(n), a_(static_cast<float>(a)) {}
  const char* name() const override {
    switch (op_) {
      case Op::Relu: return "cuda.relu";
      case Op::ReluBwd: return "cuda.relu_bwd";
      case Op::Add: return "cuda.add";
      case Op::Scale: return "cuda.scale";
      case Op::Fill: return "cuda.fill";
    }
    return "cuda.eltwise";
  }
  void run(const StepContext& ctx) override {
    const cudaStream_t s = queue(ctx);
    const unsigned b = blocks_for(n_);
    switch (op_) {
      case Op::Relu: relu_k<<<b, kThreads, 0, s>>>(in<float>(0), out<float>(0), n_); break;
      case Op::ReluBwd: relu_bwd_k<<<b, kThreads, 0, s>>>(in<float>(0), in<float>(1), out<float>(0), n_); break;
      case Op::Add: add_k<<<b, kThreads, 0, s>>>(in<float>(0), in<float>(1), out<float>(0), n_); break;
      case Op::Scale: scale_k<<<b, kThreads, 0, s>>>(in<float>(0), out<float>(0), a_, n_); break;
      case Op::Fill: fill_k<<<b, kThreads, 0, s>>>(out<float>(0), a_, n_); break;
    }
    check(cudaGetLastError(), name());
  }

 private:
  Op op_;
  int64_t n_;
  float a_;
};

}  // namespace

std::unique_ptr<Kernel> relu(const EltwiseParams& p) { return std::make_unique<Eltwise>(Op::Relu, p.n, 0.0); }
std::unique_ptr<Kernel> relu_bwd(const EltwiseParams& p) { return std::make_unique<Eltwise>(Op::ReluBwd, p.n, 0.0); }
std::unique_ptr<Kernel> add(const EltwiseParams& p) { return std::make_unique<Eltwise>(Op::Add, p.n, 0.0); }
std::unique_ptr<Kernel> scale(const EltwiseParams& p) { return std::make_unique<Eltwise>(Op::Scale, p.n, p.alpha); }
std::unique_ptr<Kernel> fill(const FillParams& p) { return std::make_unique<Eltwise>(Op::Fill, p.n, p.value); }

}  // namespace memfit::kernels::cuda
