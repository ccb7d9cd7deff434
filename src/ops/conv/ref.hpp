// Scalar reference kernels for conv2d and its two backward ops (the test
// oracle). T is float or double (double for gradient checks).
// N batch, C input channels, H/W input size, K output channels, R/S kernel
// size, OH/OW output size, G groups (Cg = C/G, Kg = K/G channels per group).
//
// Input row ih of output row oh and kernel row r: ih = oh*stride - pad + r*dil
// (likewise for columns); taps that fall into the padding read zero.
// Every output element is one sum, accumulated in double whatever T is, so
// the f32 oracle's rounding stays well below a fast kernel's: with f32 sums
// the reference's step-0 ResNet-18 gradients (tests/test_golden.cpp) drifted
// 3e-3 from PyTorch's in the first layers, with double sums they match.
// Every kernel assigns all of its outputs.
#pragma once

#include <algorithm>

#include "kernels/kernel.hpp"
#include "ops/conv/params.hpp"

namespace memfit::kernels::ref {

namespace conv_detail {

// Output position o (row or column) that reads input position i through
// kernel tap t, or -1 when none does: i = o*stride - pad + t*dil.
inline int64_t out_pos(int64_t i, int64_t t, int64_t stride, int64_t pad, int64_t dil, int64_t out_size) {
  const int64_t s = i + pad - t * dil;
  if (s < 0 || s % stride != 0 || s / stride >= out_size) return -1;
  return s / stride;
}

// Rows are processed in chunks of kChunk outputs held in double accumulators
// on the stack; the innermost loops then run over contiguous positions.
constexpr int64_t kChunk = 64;

// Range [lo, hi) of j in [0, m) with 0 <= (o0 + j)*stride + off < size.
inline void tap_range(int64_t o0, int64_t m, int64_t stride, int64_t off, int64_t size, int64_t& lo, int64_t& hi) {
  // (o0 + j)*stride + off >= 0  <=>  j >= ceil((-off) / stride) - o0
  const int64_t need = -off;
  const int64_t first = need <= 0 ? 0 : (need + stride - 1) / stride;
  const int64_t last = size - 1 - off < 0 ? -1 : (size - 1 - off) / stride;  // largest o with index < size
  lo = std::max<int64_t>(first - o0, 0);
  hi = std::min<int64_t>(last - o0 + 1, m);
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
    const ConvParams& p = p_;
    const int64_t Cg = p.C / p.groups, Kg = p.K / p.groups;
    for (int64_t n = 0; n < p.N; ++n)
      for (int64_t k = 0; k < p.K; ++k) {
        const T* xg = x + (n * p.C + k / Kg * Cg) * p.H * p.W;  // first input channel of k's group
        const T* wk = w + k * Cg * p.R * p.S;
        for (int64_t oh = 0; oh < p.OH; ++oh)
          for (int64_t ow0 = 0; ow0 < p.OW; ow0 += conv_detail::kChunk) {
            const int64_t m = std::min(conv_detail::kChunk, p.OW - ow0);
            double acc[conv_detail::kChunk];
            std::fill(acc, acc + m, b ? static_cast<double>(b[k]) : 0.0);
            for (int64_t c = 0; c < Cg; ++c)
              for (int64_t r = 0; r < p.R; ++r) {
                const int64_t ih = oh * p.stride_h - p.pad_h + r * p.dil_h;
                if (ih < 0 || ih >= p.H) continue;
                const T* xrow = xg + (c * p.H + ih) * p.W;
                for (int64_t s = 0; s < p.S; ++s) {
                  // iw = ow*stride_w + off for the outputs ow0 + [lo, hi) inside the input.
                  const int64_t off = s * p.dil_w - p.pad_w;
                  int64_t lo, hi;
                  conv_detail::tap_range(ow0, m, p.stride_w, off, p.W, lo, hi);
                  const double wv = static_cast<double>(wk[(c * p.R + r) * p.S + s]);
                  for (int64_t j = lo; j < hi; ++j)
                    acc[j] += static_cast<double>(xrow[(ow0 + j) * p.stride_w + off]) * wv;
                }
              }
            T* yrow = y + ((n * p.K + k) * p.OH + oh) * p.OW + ow0;
            for (int64_t j = 0; j < m; ++j) yrow[j] = static_cast<T>(acc[j]);
          }
      }
  }

 private:
  ConvParams p_;
};

// in: dy[N,K,OH,OW], w   out: dx[N,C,H,W]
// dx[n,ci,ih,iw] = sum over k of ci's group and taps (r, s) whose output
// position exists: dy[n,k,oh,ow] w[k,ci%Cg,r,s].
template <class T>
class Conv2dBwdData final : public Kernel {
 public:
  explicit Conv2dBwdData(ConvParams p) : p_(p) {}
  const char* name() const override { return "ref.conv2d_bwd_data"; }
  void run(const StepContext&) override {
    const T* dy = in<T>(0);
    const T* w = in<T>(1);
    T* dx = out<T>(0);
    const ConvParams& p = p_;
    const int64_t Cg = p.C / p.groups, Kg = p.K / p.groups;
    for (int64_t n = 0; n < p.N; ++n)
      for (int64_t ci = 0; ci < p.C; ++ci) {
        const int64_t k0 = ci / Cg * Kg, c = ci % Cg;
        for (int64_t ih = 0; ih < p.H; ++ih)
          for (int64_t iw0 = 0; iw0 < p.W; iw0 += conv_detail::kChunk) {
            const int64_t m = std::min(conv_detail::kChunk, p.W - iw0);
            double acc[conv_detail::kChunk];
            std::fill(acc, acc + m, 0.0);
            for (int64_t k = k0; k < k0 + Kg; ++k)
              for (int64_t r = 0; r < p.R; ++r) {
                const int64_t oh = conv_detail::out_pos(ih, r, p.stride_h, p.pad_h, p.dil_h, p.OH);
                if (oh < 0) continue;
                const T* dyrow = dy + ((n * p.K + k) * p.OH + oh) * p.OW;
                for (int64_t s = 0; s < p.S; ++s) {
                  const double wv = static_cast<double>(w[((k * Cg + c) * p.R + r) * p.S + s]);
                  if (p.stride_w == 1) {
                    // ow = iw + off for the inputs iw0 + [lo, hi) that some output reads.
                    const int64_t off = p.pad_w - s * p.dil_w;
                    int64_t lo, hi;
                    conv_detail::tap_range(iw0, m, 1, off, p.OW, lo, hi);
                    for (int64_t j = lo; j < hi; ++j) acc[j] += static_cast<double>(dyrow[iw0 + j + off]) * wv;
                  } else {
                    for (int64_t j = 0; j < m; ++j) {
                      const int64_t ow = conv_detail::out_pos(iw0 + j, s, p.stride_w, p.pad_w, p.dil_w, p.OW);
                      if (ow >= 0) acc[j] += static_cast<double>(dyrow[ow]) * wv;
                    }
                  }
                }
              }
            T* dxrow = dx + ((n * p.C + ci) * p.H + ih) * p.W + iw0;
            for (int64_t j = 0; j < m; ++j) dxrow[j] = static_cast<T>(acc[j]);
          }
      }
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
    const ConvParams& p = p_;
    const int64_t Cg = p.C / p.groups, Kg = p.K / p.groups;
    for (int64_t k = 0; k < p.K; ++k) {
      for (int64_t c = 0; c < Cg; ++c) {
        const int64_t ci = k / Kg * Cg + c;
        for (int64_t r = 0; r < p.R; ++r)
          for (int64_t s = 0; s < p.S; ++s) {
            double acc = 0;
            for (int64_t n = 0; n < p.N; ++n)
              for (int64_t oh = 0; oh < p.OH; ++oh) {
                const int64_t ih = oh * p.stride_h - p.pad_h + r * p.dil_h;
                if (ih < 0 || ih >= p.H) continue;
                for (int64_t ow = 0; ow < p.OW; ++ow) {
                  const int64_t iw = ow * p.stride_w - p.pad_w + s * p.dil_w;
                  if (iw < 0 || iw >= p.W) continue;
                  acc += static_cast<double>(dy[((n * p.K + k) * p.OH + oh) * p.OW + ow]) *
                         static_cast<double>(x[((n * p.C + ci) * p.H + ih) * p.W + iw]);
                }
              }
            dw[((k * Cg + c) * p.R + r) * p.S + s] = static_cast<T>(acc);
          }
      }
      if (db) {
        double acc = 0;
        const int64_t plane = p.OH * p.OW;
        for (int64_t n = 0; n < p.N; ++n)
          for (int64_t i = 0; i < plane; ++i) acc += static_cast<double>(dy[(n * p.K + k) * plane + i]);
        db[k] = static_cast<T>(acc);
      }
    }
  }

 private:
  ConvParams p_;
};

}  // namespace memfit::kernels::ref
