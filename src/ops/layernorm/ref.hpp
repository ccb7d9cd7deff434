// Scalar reference kernels for layer normalisation over the last axis (the
// test oracle), exactly as ops/common/params_last_axis.hpp (LayerNormParams)
// specifies. T is float or double; every sum runs in double for either, so
// the f32 oracle loses nothing to rounding but its one rounding per output.
// R rows of D values; row r is x[r D .. r D + D).
#pragma once

#include <cmath>

#include "kernels/kernel.hpp"
#include "ops/common/params_last_axis.hpp"

namespace memfit::kernels::ref {

// in: x[R,D], gamma[D], beta[D]   out: y[R,D], mean[R], rstd[R]
// y may be x's buffer: each element is read before it is written.
template <class T>
class LayerNorm final : public Kernel {
 public:
  explicit LayerNorm(LayerNormParams p) : p_(p) {}
  const char* name() const override { return "ref.layer_norm"; }
  void run(const StepContext&) override {
    const T* x = in<T>(0);
    const T* gamma = in<T>(1);
    const T* beta = in<T>(2);
    T* y = out<T>(0);
    T* mean_out = out<T>(1);
    T* rstd_out = out<T>(2);
    const int64_t D = p_.D;
    const double d = static_cast<double>(D);
    for (int64_t r = 0; r < p_.R; ++r) {
      const T* xr = x + r * D;
      double s = 0;
      for (int64_t j = 0; j < D; ++j) s += static_cast<double>(xr[j]);
      const double mean = s / d;
      double ss = 0;
      for (int64_t j = 0; j < D; ++j) {
        const double dev = static_cast<double>(xr[j]) - mean;
        ss += dev * dev;
      }
      const double rstd = 1.0 / std::sqrt(ss / d + p_.eps);
      mean_out[r] = static_cast<T>(mean);
      rstd_out[r] = static_cast<T>(rstd);
      T* yr = y + r * D;
      for (int64_t j = 0; j < D; ++j)
        yr[j] = static_cast<T>((static_cast<double>(xr[j]) - mean) * rstd * static_cast<double>(gamma[j]) +
                               static_cast<double>(beta[j]));
    }
  }

 private:
  LayerNormParams p_;
};

// in: x, dy, gamma, mean, rstd (the forward's statistics)   out: dx, dgamma[D], dbeta[D]
// With xhat = (x - mean) rstd and g = dy gamma:
//   dgamma = sum_R dy xhat, dbeta = sum_R dy,
//   dx = rstd (g - sum_D g / D - xhat sum_D g xhat / D).
// dx may be dy's buffer: the parameter gradients are summed first, then each
// row's dx is written after its sums have read it.
template <class T>
class LayerNormBwd final : public Kernel {
 public:
  explicit LayerNormBwd(LayerNormParams p) : p_(p) {}
  const char* name() const override { return "ref.layer_norm_bwd"; }
  void run(const StepContext&) override {
    const T* x = in<T>(0);
    const T* dy = in<T>(1);
    const T* gamma = in<T>(2);
    const T* mean = in<T>(3);
    const T* rstd = in<T>(4);
    T* dx = out<T>(0);
    T* dgamma = out<T>(1);
    T* dbeta = out<T>(2);
    const int64_t R = p_.R, D = p_.D;
    auto xhat = [&](int64_t r, int64_t j) {
      return (static_cast<double>(x[r * D + j]) - static_cast<double>(mean[r])) * static_cast<double>(rstd[r]);
    };
    auto g = [&](int64_t r, int64_t j) { return static_cast<double>(dy[r * D + j]) * static_cast<double>(gamma[j]); };
    for (int64_t j = 0; j < D; ++j) {
      double sg = 0, sb = 0;
      for (int64_t r = 0; r < R; ++r) {
        const double d = static_cast<double>(dy[r * D + j]);
        sg += d * xhat(r, j);
        sb += d;
      }
      dgamma[j] = static_cast<T>(sg);
      dbeta[j] = static_cast<T>(sb);
    }
    const double d = static_cast<double>(D);
    for (int64_t r = 0; r < R; ++r) {
      double s1 = 0, s2 = 0;
      for (int64_t j = 0; j < D; ++j) {
        s1 += g(r, j);
        s2 += g(r, j) * xhat(r, j);
      }
      const double rs = static_cast<double>(rstd[r]);
      for (int64_t j = 0; j < D; ++j) dx[r * D + j] = static_cast<T>(rs * (g(r, j) - s1 / d - xhat(r, j) * s2 / d));
    }
  }

 private:
  LayerNormParams p_;
};

}  // namespace memfit::kernels::ref
