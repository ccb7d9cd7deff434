// Scalar reference kernels for GELU (the test oracle), as
// ops/common/params_last_axis.hpp (GeluParams) specifies. T is float or double;
// the arithmetic is double for either.
//
// The formulas are the definitions rewritten so that nothing cancels:
//   exact: Phi(x) = erfc(-x / sqrt 2) / 2 (1 + erf(x / sqrt 2) loses every
//          digit for x << 0), gelu'(x) = Phi(x) + x phi(x),
//          phi(x) = exp(-x^2 / 2) / sqrt(2 pi);
//   tanh:  (1 + tanh u) / 2 = s = 1 / (1 + exp(-2u)) and (1 - tanh u) / 2 =
//          1 - s = 1 / (1 + exp(2u)), so y = x s and
//          gelu'(x) = s + 2 x s (1 - s) u', u' = sqrt(2/pi) (1 + 3 0.044715 x^2).
#pragma once

#include <cmath>

#include "kernels/kernel.hpp"
#include "ops/common/params_last_axis.hpp"

namespace memfit::kernels::ref {

namespace gelu_detail {

constexpr double kSqrtHalf = 0.70710678118654752440;    // 1 / sqrt 2
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)
constexpr double kBeta = 0.79788456080286535588;        // sqrt(2 / pi)
constexpr double kKappa = 0.044715;

inline double value(double x, bool tanh) {
  if (!tanh) return x * 0.5 * std::erfc(-x * kSqrtHalf);
  const double u = kBeta * (x + kKappa * x * x * x);
  return x / (1.0 + std::exp(-2.0 * u));
}

inline double derivative(double x, bool tanh) {
  if (!tanh) return 0.5 * std::erfc(-x * kSqrtHalf) + x * kInvSqrt2Pi * std::exp(-0.5 * x * x);
  const double u = kBeta * (x + kKappa * x * x * x);
  const double s = 1.0 / (1.0 + std::exp(-2.0 * u)), sm = 1.0 / (1.0 + std::exp(2.0 * u));
  return s + 2.0 * x * s * sm * kBeta * (1.0 + 3.0 * kKappa * x * x);
}

}  // namespace gelu_detail

// in: x  out: y (may be x's buffer)
template <class T>
class Gelu final : public Kernel {
 public:
  explicit Gelu(GeluParams p) : p_(p) {}
  const char* name() const override { return "ref.gelu"; }
  void run(const StepContext&) override {
    const T* x = in<T>(0);
    T* y = out<T>(0);
    for (int64_t i = 0; i < p_.n; ++i) y[i] = static_cast<T>(gelu_detail::value(static_cast<double>(x[i]), p_.tanh));
  }

 private:
  GeluParams p_;
};

// in: x, dy  out: dx = dy gelu'(x) (may be dy's buffer)
template <class T>
class GeluBwd final : public Kernel {
 public:
  explicit GeluBwd(GeluParams p) : p_(p) {}
  const char* name() const override { return "ref.gelu_bwd"; }
  void run(const StepContext&) override {
    const T* x = in<T>(0);
    const T* dy = in<T>(1);
    T* dx = out<T>(0);
    for (int64_t i = 0; i < p_.n; ++i)
      dx[i] = static_cast<T>(static_cast<double>(dy[i]) * gelu_detail::derivative(static_cast<double>(x[i]), p_.tanh));
  }

 private:
  GeluParams p_;
};

}  // namespace memfit::kernels::ref
