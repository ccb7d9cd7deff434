#include "kernels/cuda/common.hpp"
#include "ops/pool/cuda.hpp"

namespace memfit::kernels::cuda {
namespace {

#define MEMFIT_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// The part of window (oh, ow) inside the input, and its divisor (the
// reference's pool_detail::window and avg_divisor).
struct Window {
  int64_t h0, h1, w0, w1;
};
__device__ inline Window window_of(const PoolParams& p, int64_t oh, int64_t ow) {
  const int64_t hs = oh * p.stride_h - p.pad_h, ws = ow * p.stride_w - p.pad_w;
  return {hs > 0 ? hs : 0, hs + p.R < p.H ? hs + p.R : p.H, ws > 0 ? ws : 0, ws + p.S < p.W ? ws + p.S : p.W};
}
__device__ inline int64_t divisor(const PoolParams& p, const Window& w) {
  return p.count_include_pad ? p.R * p.S : (w.h1 - w.h0) * (w.w1 - w.w0);
}

// Windows covering input row h: oh with oh*stride - pad <= h < oh*stride - pad + R.
__device__ inline void covering(int64_t h, int64_t stride, int64_t pad, int64_t R, int64_t OH, int64_t& lo, int64_t& hi) {
  const int64_t top = h + pad;  // oh*stride <= top and oh*stride > top - R
  lo = top - R + 1 <= 0 ? 0 : (top - R + stride) / stride;
  hi = top / stride + 1;
  if (hi > OH) hi = OH;
}

// f(o, oh, ow, j) for every output o (flat index) whose window covers input
// element i (at j in its plane), in the reference's order: the backward
// passes gather what the reference scatters.
template <class F>
__device__ void for_covering(const PoolParams& p, int64_t i, F f) {
  const int64_t in_plane = p.H * p.W, out_plane = p.OH * p.OW;
  const int64_t nc = i / in_plane, j = i % in_plane, h = j / p.W, w = j % p.W;
  int64_t oh0, oh1, ow0, ow1;
  covering(h, p.stride_h, p.pad_h, p.R, p.OH, oh0, oh1);
  covering(w, p.stride_w, p.pad_w, p.S, p.OW, ow0, ow1);
  for (int64_t oh = oh0; oh < oh1; ++oh)
    for (int64_t ow = ow0; ow < ow1; ++ow) f(nc * out_plane + oh * p.OW + ow, oh, ow, j);
}

__global__ void max_pool_k(PoolParams p, const float* x, float* y, int32_t* idx) {
  const int64_t out_plane = p.OH * p.OW;
  MEMFIT_GRID_LOOP(o, p.N * p.C * out_plane) {
    const float* xp = x + o / out_plane * p.H * p.W;
    const Window win = window_of(p, o % out_plane / p.OW, o % p.OW);
    int64_t best = win.h0 * p.W + win.w0;
    for (int64_t h = win.h0; h < win.h1; ++h)
      for (int64_t w = win.w0; w < win.w1; ++w) {
        const float v = xp[h * p.W + w];
        if (v > xp[best] || isnan(v)) best = h * p.W + w;
      }
    y[o] = xp[best];
    idx[o] = static_cast<int32_t>(best);
  }
}

__global__ void max_pool_bwd_k(PoolParams p, const float* dy, const int32_t* idx, float* dx) {
  MEMFIT_GRID_LOOP(i, p.N * p.C * p.H * p.W) {
    float acc = 0.0f;
    for_covering(p, i, [&](int64_t o, int64_t, int64_t, int64_t j) {
      if (idx[o] == j) acc += dy[o];
    });
    dx[i] = acc;
  }
}

// One thread per output: the window summed in double, divided.
__global__ void avg_pool_k(PoolParams p, const float* x, float* y) {
  const int64_t out_plane = p.OH * p.OW;
  MEMFIT_GRID_LOOP(o, p.N * p.C * out_plane) {
    const int64_t nc = o / out_plane, oh = o % out_plane / p.OW, ow = o % p.OW;
    const float* xp = x + nc * p.H * p.W;
    const Window w = window_of(p, oh, ow);
    double acc = 0;
    for (int64_t h = w.h0; h < w.h1; ++h)
      for (int64_t c = w.w0; c < w.w1; ++c) acc += static_cast<double>(xp[h * p.W + c]);
    y[o] = static_cast<float>(acc / static_cast<double>(divisor(p, w)));
  }
}

// One thread per input element: the windows covering it, in the
// reference's order, each adding dy / divisor (in f32, as the reference).
__global__ void avg_pool_bwd_k(PoolParams p, const float* dy, float* dx) {
  MEMFIT_GRID_LOOP(i, p.N * p.C * p.H * p.W) {
    float acc = 0.0f;
    for_covering(p, i, [&](int64_t o, int64_t oh, int64_t ow, int64_t) {
      acc += dy[o] / static_cast<float>(divisor(p, window_of(p, oh, ow)));
    });
    dx[i] = acc;
  }
}

class AvgPool final : public Kernel {
 public:
  AvgPool(PoolParams p, bool bwd) : p_(p), bwd_(bwd) {}
  const char* name() const override { return bwd_ ? "cuda.avg_pool2d_bwd" : "cuda.avg_pool2d"; }
  void run(const StepContext& ctx) override {
    const cudaStream_t s = queue(ctx);
    if (bwd_) avg_pool_bwd_k<<<blocks_for(p_.N * p_.C * p_.H * p_.W), kThreads, 0, s>>>(p_, in<float>(0), out<float>(0));
    else avg_pool_k<<<blocks_for(p_.N * p_.C * p_.OH * p_.OW), kThreads, 0, s>>>(p_, in<float>(0), out<float>(0));
    check(cudaGetLastError(), name());
  }

 private:
  PoolParams p_;
  bool bwd_;
};

// One thread per (n, c): the plane summed in order, in double as the reference.
__global__ void global_avg_k(GlobalPoolParams p, const float* x, float* y) {
  MEMFIT_GRID_LOOP(nc, p.N * p.C) {
    double acc = 0.0;
    for (int64_t k = 0; k < p.HW; ++k) acc += static_cast<double>(x[nc * p.HW + k]);
    y[nc] = static_cast<float>(acc / static_cast<double>(p.HW));
  }
}

__global__ void global_avg_bwd_k(GlobalPoolParams p, const float* dy, float* dx) {
  MEMFIT_GRID_LOOP(i, p.N * p.C * p.HW) dx[i] = dy[i / p.HW] / static_cast<float>(p.HW);
}

class MaxPool final : public Kernel {
 public:
  MaxPool(PoolParams p, bool bwd) : p_(p), bwd_(bwd) {}
  const char* name() const override { return bwd_ ? "cuda.max_pool2d_bwd" : "cuda.max_pool2d"; }
  void run(const StepContext& ctx) override {
    const cudaStream_t s = queue(ctx);
    if (bwd_)
      max_pool_bwd_k<<<blocks_for(p_.N * p_.C * p_.H * p_.W), kThreads, 0, s>>>(p_, in<float>(0), in<int32_t>(1),
                                                                                out<float>(0));
    else
      max_pool_k<<<blocks_for(p_.N * p_.C * p_.OH * p_.OW), kThreads, 0, s>>>(p_, in<float>(0), out<float>(0),
                                                                              out<int32_t>(1));
    check(cudaGetLastError(), name());
  }

 private:
  PoolParams p_;
  bool bwd_;
};

class GlobalAvg final : public Kernel {
 public:
  GlobalAvg(GlobalPoolParams p, bool bwd) : p_(p), bwd_(bwd) {}
  const char* name() const override { return bwd_ ? "cuda.global_avg_pool_bwd" : "cuda.global_avg_pool"; }
  void run(const StepContext& ctx) override {
    const cudaStream_t s = queue(ctx);
    if (bwd_) global_avg_bwd_k<<<blocks_for(p_.N * p_.C * p_.HW), kThreads, 0, s>>>(p_, in<float>(0), out<float>(0));
    else global_avg_k<<<blocks_for(p_.N * p_.C), kThreads, 0, s>>>(p_, in<float>(0), out<float>(0));
    check(cudaGetLastError(), name());
  }

 private:
  GlobalPoolParams p_;
  bool bwd_;
};

}  // namespace

std::unique_ptr<Kernel> max_pool2d(const PoolParams& p) { return std::make_unique<MaxPool>(p, false); }
std::unique_ptr<Kernel> max_pool2d_bwd(const PoolParams& p) { return std::make_unique<MaxPool>(p, true); }
std::unique_ptr<Kernel> avg_pool2d(const PoolParams& p) { return std::make_unique<AvgPool>(p, false); }
std::unique_ptr<Kernel> avg_pool2d_bwd(const PoolParams& p) { return std::make_unique<AvgPool>(p, true); }
std::unique_ptr<Kernel> global_avg_pool(const GlobalPoolParams& p) { return std::make_unique<GlobalAvg>(p, false); }
std::unique_ptr<Kernel> global_avg_pool_bwd(const GlobalPoolParams& p) { return std::make_unique<GlobalAvg>(p, true); }

}  // namespace memfit::kernels::cuda
