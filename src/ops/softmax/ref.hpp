// Scalar reference kernels for softmax over the last axis (the test oracle),
// as ops/common/params_last_axis.hpp (SoftmaxParams) specifies. T is float or
// double; the arithmetic is double for either. R rows of D values.
#pragma once

#include <algorithm>
#include <cmath>

#include "kernels/kernel.hpp"
#include "ops/common/params_last_axis.hpp"

namespace memfit::kernels::ref {

// in: x[R,D]  out: y = exp(x - max) / sum exp(x - max) per row (may be x's
// buffer: each element is read before it is written)
template <class T>
class Softmax final : public Kernel {
 public:
  explicit Softmax(SoftmaxParams p) : p_(p) {}
  const char* name() const override { return "ref.softmax"; }
  void run(const StepContext&) override {
    const T* x = in<T>(0);
    T* y = out<T>(0);
    const int64_t D = p_.D;
    for (int64_t r = 0; r < p_.R; ++r) {
      const T* xr = x + r * D;
      double mx = static_cast<double>(xr[0]);
      for (int64_t j = 1; j < D; ++j) mx = std::max(mx, static_cast<double>(xr[j]));
      double s = 0;
      for (int64_t j = 0; j < D; ++j) s += std::exp(static_cast<double>(xr[j]) - mx);
      T* yr = y + r * D;
      for (int64_t j = 0; j < D; ++j) yr[j] = static_cast<T>(std::exp(static_cast<double>(xr[j]) - mx) / s);
    }
  }

 private:
  SoftmaxParams p_;
};

// in: y, dy  out: dx = y (dy - sum_D dy y) (may be dy's buffer)
template <class T>
class SoftmaxBwd final : public Kernel {
 public:
  explicit SoftmaxBwd(SoftmaxParams p) : p_(p) {}
  const char* name() const override { return "ref.softmax_bwd"; }
  void run(const StepContext&) override {
    const T* y = in<T>(0);
    const T* dy = in<T>(1);
    T* dx = out<T>(0);
    const int64_t D = p_.D;
    for (int64_t r = 0; r < p_.R; ++r) {
      const int64_t o = r * D;
      double s = 0;
      for (int64_t j = 0; j < D; ++j) s += static_cast<double>(dy[o + j]) * static_cast<double>(y[o + j]);
      for (int64_t j = 0; j < D; ++j)
        dx[o + j] = static_cast<T>(static_cast<double>(y[o + j]) * (static_cast<double>(dy[o + j]) - s));
    }
  }

 private:
  SoftmaxParams p_;
};

}  // namespace memfit::kernels::ref
