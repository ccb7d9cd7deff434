// Scalar reference kernels for max/avg pooling and global average pooling
// (the test oracle). T is float or double (double for gradient checks);
// forward sums accumulate in double either way.
// N batch, C channels, H/W input size, R/S window size, OH/OW output size.
//
// Window (oh, ow) covers input rows oh*stride_h - pad_h + [0, R) and columns
// ow*stride_w - pad_w + [0, S); padded positions are skipped, never read.
// Backward kernels assign all of dx (zero where no window reaches).
#pragma once

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>

#include "kernels/kernel.hpp"
#include "ops/pool/params.hpp"

namespace memfit::kernels::ref {

namespace pool_detail {

// The part of window (oh, ow) that lies inside the input: rows [h0, h1), columns [w0, w1).
struct Window {
  int64_t h0, h1, w0, w1;
};
inline Window window(const PoolParams& p, int64_t oh, int64_t ow) {
  const int64_t hs = oh * p.stride_h - p.pad_h, ws = ow * p.stride_w - p.pad_w;
  return {std::max<int64_t>(hs, 0), std::min(hs + p.R, p.H), std::max<int64_t>(ws, 0), std::min(ws + p.S, p.W)};
}

// Divisor of one average window: the full window (count_include_pad; shape
// inference keeps pad <= window/2, so a window never reaches past the padded
// border) or its valid elements.
inline int64_t avg_divisor(const PoolParams& p, const Window& w) {
  return p.count_include_pad ? p.R * p.S : (w.h1 - w.h0) * (w.w1 - w.w0);
}

}  // namespace pool_detail

// in: x[N,C,H,W]   out: y[N,C,OH,OW], idx[N,C,OH,OW] (i32)
// idx is the flat position h*W + w of the maximum within its (n, c) input
// plane. Ties go to the first element in row-major scan order; a NaN wins
// (as in PyTorch), so NaNs propagate.
template <class T>
class MaxPool2d final : public Kernel {
 public:
  explicit MaxPool2d(PoolParams p) : p_(p) {}
  const char* name() const override { return "ref.max_pool2d"; }
  void run(const StepContext&) override {
    const T* x = in<T>(0);
    T* y = out<T>(0);
    int32_t* idx = out<int32_t>(1);
    const int64_t in_plane = p_.H * p_.W, out_plane = p_.OH * p_.OW;
    for (int64_t nc = 0; nc < p_.N * p_.C; ++nc) {
      const T* xp = x + nc * in_plane;
      for (int64_t oh = 0; oh < p_.OH; ++oh)
        for (int64_t ow = 0; ow < p_.OW; ++ow) {
          const pool_detail::Window w = pool_detail::window(p_, oh, ow);
          assert(w.h0 < w.h1 && w.w0 < w.w1 && "shape inference keeps every window partly inside");
          int64_t best = w.h0 * p_.W + w.w0;
          for (int64_t h = w.h0; h < w.h1; ++h)
            for (int64_t c = w.w0; c < w.w1; ++c) {
              const T v = xp[h * p_.W + c];
              if (v > xp[best] || std::isnan(v)) best = h * p_.W + c;
            }
          y[nc * out_plane + oh * p_.OW + ow] = xp[best];
          idx[nc * out_plane + oh * p_.OW + ow] = static_cast<int32_t>(best);
        }
    }
  }

 private:
  PoolParams p_;
};

// in: dy[N,C,OH,OW], idx   out: dx[N,C,H,W]; overlapping windows add up.
template <class T>
class MaxPool2dBwd final : public Kernel {
 public:
  explicit MaxPool2dBwd(PoolParams p) : p_(p) {}
  const char* name() const override { return "ref.max_pool2d_bwd"; }
  void run(const StepContext&) override {
    const T* dy = in<T>(0);
    const int32_t* idx = in<int32_t>(1);
    T* dx = out<T>(0);
    const int64_t in_plane = p_.H * p_.W, out_plane = p_.OH * p_.OW;
    std::fill(dx, dx + p_.N * p_.C * in_plane, T(0));
    for (int64_t nc = 0; nc < p_.N * p_.C; ++nc)
      for (int64_t o = 0; o < out_plane; ++o) {
        const int32_t j = idx[nc * out_plane + o];
        assert(j >= 0 && j < in_plane && "max-pool index workspace out of range");
        dx[nc * in_plane + j] += dy[nc * out_plane + o];
      }
  }

 private:
  PoolParams p_;
};

// in: x   out: y
template <class T>
class AvgPool2d final : public Kernel {
 public:
  explicit AvgPool2d(PoolParams p) : p_(p) {}
  const char* name() const override { return "ref.avg_pool2d"; }
  void run(const StepContext&) override {
    const T* x = in<T>(0);
    T* y = out<T>(0);
    const int64_t in_plane = p_.H * p_.W, out_plane = p_.OH * p_.OW;
    for (int64_t nc = 0; nc < p_.N * p_.C; ++nc) {
      const T* xp = x + nc * in_plane;
      for (int64_t oh = 0; oh < p_.OH; ++oh)
        for (int64_t ow = 0; ow < p_.OW; ++ow) {
          const pool_detail::Window w = pool_detail::window(p_, oh, ow);
          double acc = 0;
          for (int64_t h = w.h0; h < w.h1; ++h)
            for (int64_t c = w.w0; c < w.w1; ++c) acc += static_cast<double>(xp[h * p_.W + c]);
          const double div = static_cast<double>(pool_detail::avg_divisor(p_, w));
          y[nc * out_plane + oh * p_.OW + ow] = static_cast<T>(acc / div);
        }
    }
  }

 private:
  PoolParams p_;
};

// in: dy   out: dx
template <class T>
class AvgPool2dBwd final : public Kernel {
 public:
  explicit AvgPool2dBwd(PoolParams p) : p_(p) {}
  const char* name() const override { return "ref.avg_pool2d_bwd"; }
  void run(const StepContext&) override {
    const T* dy = in<T>(0);
    T* dx = out<T>(0);
    const int64_t in_plane = p_.H * p_.W, out_plane = p_.OH * p_.OW;
    std::fill(dx, dx + p_.N * p_.C * in_plane, T(0));
    for (int64_t nc = 0; nc < p_.N * p_.C; ++nc) {
      T* dxp = dx + nc * in_plane;
      for (int64_t oh = 0; oh < p_.OH; ++oh)
        for (int64_t ow = 0; ow < p_.OW; ++ow) {
          const pool_detail::Window w = pool_detail::window(p_, oh, ow);
          const T g = dy[nc * out_plane + oh * p_.OW + ow] / static_cast<T>(pool_detail::avg_divisor(p_, w));
          for (int64_t h = w.h0; h < w.h1; ++h)
            for (int64_t c = w.w0; c < w.w1; ++c) dxp[h * p_.W + c] += g;
        }
    }
  }

 private:
  PoolParams p_;
};

// in: x[N,C,HW]   out: y[N,C]
template <class T>
class GlobalAvgPool final : public Kernel {
 public:
  explicit GlobalAvgPool(GlobalPoolParams p) : p_(p) {}
  const char* name() const override { return "ref.global_avg_pool"; }
  void run(const StepContext&) override {
    const T* x = in<T>(0);
    T* y = out<T>(0);
    for (int64_t nc = 0; nc < p_.N * p_.C; ++nc) {
      double acc = 0;
      for (int64_t i = 0; i < p_.HW; ++i) acc += static_cast<double>(x[nc * p_.HW + i]);
      y[nc] = static_cast<T>(acc / static_cast<double>(p_.HW));
    }
  }

 private:
  GlobalPoolParams p_;
};

// in: dy[N,C]   out: dx[N,C,HW] = dy / HW
template <class T>
class GlobalAvgPoolBwd final : public Kernel {
 public:
  explicit GlobalAvgPoolBwd(GlobalPoolParams p) : p_(p) {}
  const char* name() const override { return "ref.global_avg_pool_bwd"; }
  void run(const StepContext&) override {
    const T* dy = in<T>(0);
    T* dx = out<T>(0);
    for (int64_t nc = 0; nc < p_.N * p_.C; ++nc) {
      const T g = dy[nc] / static_cast<T>(p_.HW);
      for (int64_t i = 0; i < p_.HW; ++i) dx[nc * p_.HW + i] = g;
    }
  }

 private:
  GlobalPoolParams p_;
};

}  // namespace memfit::kernels::ref
