#include <cmath>

#include "kernels/cuda/common.hpp"
#include "ops/optim/cuda.hpp"

namespace memfit::kernels::cuda {
namespace {

constexpr int kNormBlocks = 128;  // partial sums per tensor

#define MEMFIT_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// part[b] = sum of g^2 over block b's grid-stride share, a fixed tree per block.
__global__ void sum_squares_k(const float* g, int64_t n, double* part) {
  __shared__ double s[kThreads];
  double acc = 0;
  MEMFIT_GRID_LOOP(i, n) acc += static_cast<double>(g[i]) * static_cast<double>(g[i]);
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) part[blockIdx.x] = s[0];
}

// scale[0] = the gradient scale after clipping (clipped_scale in ref.hpp).
__global__ void clip_scale_k(const double* part, int64_t parts, double grad_scale, double clip_norm, double* scale) {
  double ss = 0;
  for (int64_t i = 0; i < parts; ++i) ss += part[i];
  const double norm = sqrt(ss) * fabs(grad_scale);
  const double coef = clip_norm / (norm + 1e-6);
  scale[0] = coef < 1.0 ? grad_scale * coef : grad_scale;
}

__device__ inline float grad_scale_of(float host, const double* dev) { return dev ? static_cast<float>(dev[0]) : host; }

__global__ void sgd_k(float* w, const float* g, float* m, int64_t n, float lr, float mom, float wd, bool nesterov,
                      float gs_host, const double* gs_dev) {
  const float gs = grad_scale_of(gs_host, gs_dev);
  MEMFIT_GRID_LOOP(i, n) {
    float d = g[i] * gs + wd * w[i];
    if (m) {
      m[i] = mom * m[i] + d;
      d = nesterov ? d + mom * m[i] : m[i];
    }
    w[i] -= lr * d;
  }
}

__global__ void adam_k(float* w, const float* g, float* m, float* v, int64_t n, float lr, float b1, float b2, float c1,
                       float c2, float eps, float wd, bool decoupled, float gs_host, const double* gs_dev) {
  const float gs = grad_scale_of(gs_host, gs_dev);
  MEMFIT_GRID_LOOP(i, n) {
    float d = g[i] * gs;
    if (decoupled) w[i] -= lr * wd * w[i];
    else d += wd * w[i];
    m[i] = b1 * m[i] + (1.0f - b1) * d;
    v[i] = b2 * v[i] + (1.0f - b2) * d * d;
    w[i] -= lr * (m[i] / c1) / (sqrtf(v[i] / c2) + eps);
  }
}

__global__ void accumulate_k(float* acc, const float* g, int64_t n, bool first) {
  MEMFIT_GRID_LOOP(i, n) acc[i] = first ? g[i] : acc[i] + g[i];
}

class GradAccumulate final : public Kernel {
 public:
  explicit GradAccumulate(int64_t n) : n_(n) {}
  const char* name() const override { return "cuda.grad_accumulate"; }
  void run(const StepContext& ctx) override {
    accumulate_k<<<blocks_for(n_), kThreads, 0, queue(ctx)>>>(in<float>(0), in<float>(1), n_, ctx.micro == 0);
    check(cudaGetLastError(), name());
  }

 private:
  int64_t n_;
};

// The shared part: sizes, clipping and its scratch.
template <class P>
class Update : public Kernel {
 public:
  explicit Update(P p) : p_(std::move(p)) {}
  size_t scratch_bytes() const override {
    return p_.clip_norm > 0 ? (p_.sizes.size() * kNormBlocks + 1) * sizeof(double) : 0;
  }

 protected:
  // The device scalar holding the clipped gradient scale, or nullptr
  // (no clipping: the kernels take ctx.grad_scale as an argument).
  const double* clip(const StepContext& ctx) {
    if (p_.clip_norm <= 0) return nullptr;
    const cudaStream_t s = queue(ctx);
    const size_t k = p_.sizes.size();
    double* part = static_cast<double*>(scratch_);
    for (size_t t = 0; t < k; ++t)
      sum_squares_k<<<kNormBlocks, kThreads, 0, s>>>(in<float>(k + t), p_.sizes[t], part + t * kNormBlocks);
    clip_scale_k<<<1, 1, 0, s>>>(part, static_cast<int64_t>(k * kNormBlocks), ctx.grad_scale, p_.clip_norm,
                                 part + k * kNormBlocks);
    return part + k * kNormBlocks;
  }
  P p_;
};

class Sgd final : public Update<SgdParams> {
 public:
  using Update::Update;
  const char* name() const override { return "cuda.sgd_update"; }
  void run(const StepContext& ctx) override {
    const double* gs = clip(ctx);
    const size_t k = p_.sizes.size();
    for (size_t t = 0; t < k; ++t)
      sgd_k<<<blocks_for(p_.sizes[t]), kThreads, 0, queue(ctx)>>>(
          in<float>(t), in<float>(k + t), p_.momentum != 0.0 ? in<float>(2 * k + t) : nullptr, p_.sizes[t],
          static_cast<float>(ctx.lr), static_cast<float>(p_.momentum), static_cast<float>(p_.weight_decay[t]),
          p_.nesterov, static_cast<float>(ctx.grad_scale), gs);
    check(cudaGetLastError(), name());
  }
};

class Adam final : public Update<AdamParams> {
 public:
  using Update::Update;
  const char* name() const override { return "cuda.adam_update"; }
  void run(const StepContext& ctx) override {
    const double* gs = clip(ctx);
    const size_t k = p_.sizes.size();
    const double t1 = static_cast<double>(ctx.step + 1);
    const float c1 = static_cast<float>(1.0 - std::pow(p_.beta1, t1)), c2 = static_cast<float>(1.0 - std::pow(p_.beta2, t1));
    for (size_t t = 0; t < k; ++t)
      adam_k<<<blocks_for(p_.sizes[t]), kThreads, 0, queue(ctx)>>>(
          in<float>(t), in<float>(k + t), in<float>(2 * k + t), in<float>(3 * k + t), p_.sizes[t],
          static_cast<float>(ctx.lr), static_cast<float>(p_.beta1), static_cast<float>(p_.beta2), c1, c2,
          static_cast<float>(p_.eps), static_cast<float>(p_.weight_decay[t]), p_.decoupled,
          static_cast<float>(ctx.grad_scale), gs);
    check(cudaGetLastError(), name());
  }
};

}  // namespace

std::unique_ptr<Kernel> sgd_update(const SgdParams& p) { return std::make_unique<Sgd>(p); }
std::unique_ptr<Kernel> adam_update(const AdamParams& p) { return std::make_unique<Adam>(p); }
std::unique_ptr<Kernel> grad_accumulate(int64_t n) { return std::make_unique<GradAccumulate>(n); }

}  // namespace memfit::kernels::cuda
