// Scalar reference kernels for conv2d and its two backward ops (the test
// oracle). T is float or double (double for gradient checks).
// N batch, C input channels, H/W input size, K output channels, R/S kernel
// size, OH/OW output size, G groups (Cg = C/G, Kg = K/G channels per group).
//
// Input row ih of output row oh and kernel row r: ih = oh*stride - pad + r*dil
// (likewise for columns); taps that fall into the padding read zero.
// Every kernel assigns all of its outputs.
#pragma once

#include <algorithm>

#include "kernels/kernel.hpp"
#include "kernels/params.hpp"

namespace memfit::kernels::ref {

namespace conv_detail {

// Calls f(x_index, y_index, w_index) for every tap of one (n, k) output plane
// and one input channel c of k's group that lies inside the input.
template <class F>
inline void for_each_tap(const ConvParams& p, int64_t n, int64_t k, int64_t c, F&& f) {
  const int64_t Cg = p.C / p.groups, Kg = p.K / p.groups;
  const int64_t ci = (k / Kg) * Cg + c;  // input channel
  const int64_t x_plane = (n * p.C + ci) * p.H * p.W;
  const int64_t y_plane = (n * p.K + k) * p.OH * p.OW;
  const int64_t w_base = (k * Cg + c) * p.R * p.S;
  for (int64_t r = 0; r < p.R; ++r)
    for (int64_t oh = 0; oh < p.OH; ++oh) {
      const int64_t ih = oh * p.stride_h - p.pad_h + r * p.dil_h;
      if (ih < 0 || ih >= p.H) continue;
      for (int64_t s = 0; s < p.S; ++s)
        for (int64_t ow = 0; ow < p.OW; ++ow) {
          const int64_t iw = ow * p.stride_w - p.pad_w + s * p.dil_w;
          if (iw < 0 || iw >= p.W) continue;
          f(x_plane + ih * p.W + iw, y_plane + oh * p.OW + ow, w_base + r * p.S + s);
        }
    }
}

}  // namespace conv_detail

// in: x[N,C,H,W], w[K,C/G,R,S], b[K] (if bias)   out: y[N,K,OH,OW]
template <class T>
class Conv2d final : public Kernel {
 public:
  explicit Conv2d(ConvParams p) : p_(p) {}
  const char* name() const override { return "ref.conv2d"; }
  void run(const StepContext&) override {
    const T* x = in<T>(0);
    const T* w = in<T>(1);
    const T* b = p_.bias ? in<T>(2) : nullptr;
    T* y = out<T>(0);
    const int64_t plane = p_.OH * p_.OW, Cg = p_.C / p_.groups;
    for (int64_t n = 0; n < p_.N; ++n)
      for (int64_t k = 0; k < p_.K; ++k) {
        T* yp = y + (n * p_.K + k) * plane;
        std::fill(yp, yp + plane, b ? b[k] : T(0));
        for (int64_t c = 0; c < Cg; ++c)
          conv_detail::for_each_tap(p_, n, k, c, [&](int64_t xi, int64_t yi, int64_t wi) { y[yi] += x[xi] * w[wi]; });
      }
  }

 private:
  ConvParams p_;
};

// in: dy[N,K,OH,OW], w   out: dx[N,C,H,W]
template <class T>
class Conv2dBwdData final : public Kernel {
 public:
  explicit Conv2dBwdData(ConvParams p) : p_(p) {}
  const char* name() const override { return "ref.conv2d_bwd_data"; }
  void run(const StepContext&) override {
    const T* dy = in<T>(0);
    const T* w = in<T>(1);
    T* dx = out<T>(0);
    std::fill(dx, dx + p_.N * p_.C * p_.H * p_.W, T(0));
    const int64_t Cg = p_.C / p_.groups;
    for (int64_t n = 0; n < p_.N; ++n)
      for (int64_t k = 0; k < p_.K; ++k)
        for (int64_t c = 0; c < Cg; ++c)
          conv_detail::for_each_tap(p_, n, k, c, [&](int64_t xi, int64_t yi, int64_t wi) { dx[xi] += dy[yi] * w[wi]; });
  }

 private:
  ConvParams p_;
};

// in: x, dy   out: dw[K,C/G,R,S], db[K] (if bias)
template <class T>
class Conv2dBwdWeight final : public Kernel {
 public:
  explicit Conv2dBwdWeight(ConvParams p) : p_(p) {}
  const char* name() const override { return "ref.conv2d_bwd_weight"; }
  void run(const StepContext&) override {
    const T* x = in<T>(0);
    const T* dy = in<T>(1);
    T* dw = out<T>(0);
    T* db = p_.bias ? out<T>(1) : nullptr;
    const int64_t Cg = p_.C / p_.groups, plane = p_.OH * p_.OW;
    std::fill(dw, dw + p_.K * Cg * p_.R * p_.S, T(0));
    for (int64_t n = 0; n < p_.N; ++n)
      for (int64_t k = 0; k < p_.K; ++k)
        for (int64_t c = 0; c < Cg; ++c)
          conv_detail::for_each_tap(p_, n, k, c, [&](int64_t xi, int64_t yi, int64_t wi) { dw[wi] += dy[yi] * x[xi]; });
    if (db)
      for (int64_t k = 0; k < p_.K; ++k) {
        T acc = 0;
        for (int64_t n = 0; n < p_.N; ++n)
          for (int64_t i = 0; i < plane; ++i) acc += dy[(n * p_.K + k) * plane + i];
        db[k] = acc;
      }
  }

 private:
  ConvParams p_;
};

}  // namespace memfit::kernels::ref
