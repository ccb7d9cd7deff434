#include "kernels/cuda/common.hpp"
#include "memfit/rng.hpp"
#include "ops/dropout/cuda.hpp"

namespace memfit::kernels::cuda {
namespace {

__global__ void dropout_k(const float* x, float* y, uint8_t* mask, int64_t n, uint64_t key, uint64_t base, float p,
                          float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const bool keep = rng::uniform01(key, base + static_cast<uint64_t>(i)) >= p;
    mask[i] = keep ? 1 : 0;
    y[i] = keep ? x[i] * scale : 0.0f;
  }
}

__global__ void dropout_bwd_k(const float* dy, const uint8_t* mask, float* dx, int64_t n, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dx[i] = mask[i] ? dy[i] * scale : 0.0f;
}

class Dropout final : public Kernel {
 public:
  Dropout(DropoutParams p, bool bwd) : p_(p), bwd_(bwd) {}
  const char* name() const override { return bwd_ ? "cuda.dropout_bwd" : "cuda.dropout"; }
  void run(const StepContext& ctx) override {
    const cudaStream_t s = queue(ctx);
    // 1/(1-p) in f32, as the reference computes it for f32.
    const float scale = 1.0f / (1.0f - static_cast<float>(p_.p));
    if (bwd_) {
      dropout_bwd_k<<<blocks_for(p_.n), kThreads, 0, s>>>(in<float>(0), in<uint8_t>(1), out<float>(0), p_.n, scale);
    } else {
      const DropoutDraw d = dropout_draw(p_, ctx.seed, ctx.step, ctx.row0);
      dropout_k<<<blocks_for(p_.n), kThreads, 0, s>>>(in<float>(0), out<float>(0), out<uint8_t>(1), p_.n, d.key, d.base,
                                                      static_cast<float>(p_.p), scale);
    }
    check(cudaGetLastError(), name());
  }

 private:
  DropoutParams p_;
  bool bwd_;
};

}  // namespace

std::unique_ptr<Kernel> dropout(const DropoutParams& p) { return std::make_unique<Dropout>(p, false); }
std::unique_ptr<Kernel> dropout_bwd(const DropoutParams& p) { return std::make_unique<Dropout>(p, true); }

}  // namespace memfit::kernels::cuda
