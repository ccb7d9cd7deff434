// Scalar reference kernels for mean softmax cross-entropy with optional label
// smoothing (the test oracle). T is float or double for the float values;
// labels are i32 in every backend. N rows, C classes; s = smoothing and
// q = (1-s) onehot(label) + s/C is the target distribution.
//
// Labels must lie in [0, C). The data loader validates them when it reads a
// dataset (the API boundary); a kernel cannot report an error mid-step. As a
// last line of defence an out-of-range label is never used as an index: its
// row's loss and gradient become NaN, so the mistake shows in the loss instead
// of reading out of bounds or silently training on a wrong target.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/kernel.hpp"
#include "ops/loss/params.hpp"

namespace memfit::kernels::ref {

// in: logits[N,C], labels[N] (i32)   out: loss[1], probs[N,C]
//   p = softmax(z) computed as exp(z - max z) / sum exp(z - max z);
//   loss = mean_N -sum_c q_c log p_c with log p_c = (z_c - max) - log sum.
template <class T>
class SoftmaxXent final : public Kernel {
 public:
  explicit SoftmaxXent(XentParams p) : p_(p) {}
  const char* name() const override { return "ref.softmax_xent"; }
  void run(const StepContext&) override {
    const T* z = in<T>(0);
    const int32_t* labels = in<int32_t>(1);
    T* loss = out<T>(0);
    T* probs = out<T>(1);
    const int64_t C = p_.C;
    const double s = p_.smoothing, on = 1.0 - s, off = s / static_cast<double>(C);
    double total = 0;
    for (int64_t i = 0; i < p_.N; ++i) {
      const T* zi = z + i * C;
      double mx = static_cast<double>(zi[0]);
      for (int64_t c = 1; c < C; ++c) mx = std::max(mx, static_cast<double>(zi[c]));
      double sum = 0, sum_shifted = 0;  // sum exp(z - max), sum (z - max)
      for (int64_t c = 0; c < C; ++c) {
        const double d = static_cast<double>(zi[c]) - mx;
        sum += std::exp(d);
        sum_shifted += d;
      }
      const double lse = std::log(sum);
      for (int64_t c = 0; c < C; ++c)
        probs[i * C + c] = static_cast<T>(std::exp(static_cast<double>(zi[c]) - mx) / sum);
      const int32_t y = labels[i];
      // -sum_c q_c log p_c = (1-s) (lse - d_y) + s/C (C lse - sum_c d_c)
      if (y < 0 || y >= C) {
        total += std::numeric_limits<double>::quiet_NaN();
        continue;
      }
      total += on * (lse - (static_cast<double>(zi[y]) - mx)) + off * (static_cast<double>(C) * lse - sum_shifted);
    }
    loss[0] = static_cast<T>(total / static_cast<double>(p_.N));
  }

 private:
  XentParams p_;
};

// in: probs[N,C], labels[N] (i32), dloss[1]   out: dlogits = (p - q) dloss / N.
// dlogits may be probs' buffer (in place): each element is read before it is
// written.
template <class T>
class SoftmaxXentBwd final : public Kernel {
 public:
  explicit SoftmaxXentBwd(XentParams p) : p_(p) {}
  const char* name() const override { return "ref.softmax_xent_bwd"; }
  void run(const StepContext&) override {
    const T* probs = in<T>(0);
    const int32_t* labels = in<int32_t>(1);
    const T* dloss = in<T>(2);
    T* dz = out<T>(0);
    const int64_t C = p_.C;
    const double g = static_cast<double>(dloss[0]) / static_cast<double>(p_.N);
    const double on = 1.0 - p_.smoothing, off = p_.smoothing / static_cast<double>(C);
    constexpr T kNaN = std::numeric_limits<T>::quiet_NaN();
    for (int64_t i = 0; i < p_.N; ++i) {
      const int32_t y = labels[i];
      const bool valid = y >= 0 && y < C;
      for (int64_t c = 0; c < C; ++c) {
        const double q = (c == y ? on : 0.0) + off;
        dz[i * C + c] = valid ? static_cast<T>((static_cast<double>(probs[i * C + c]) - q) * g) : kNaN;
      }
    }
  }

 private:
  XentParams p_;
};

}  // namespace memfit::kernels::ref
