// Scalar reference kernels of the pointwise activations (the test oracle),
// as ops/activation/params.hpp specifies. T is float or double; the
// arithmetic is double for either.
#pragma once

#include <algorithm>
#include <cmath>

#include "kernels/kernel.hpp"
#include "ops/activation/params.hpp"

namespace memfit::kernels::ref {

namespace act_detail {

inline double sig(double x) { return 1.0 / (1.0 + std::exp(-x)); }

inline double value(const ActivationParams& p, double x) {
  switch (p.kind) {
    case ActKind::Sigmoid: return sig(x);
    case ActKind::Tanh: return std::tanh(x);
    case ActKind::Silu: return x * sig(x);
    case ActKind::Clip: return std::min(std::max(x, p.a), p.b);
    case ActKind::HardSigmoid: return std::min(std::max(p.a * x + p.b, 0.0), 1.0);
    case ActKind::HardSwish: return x * std::min(std::max(x / 6.0 + 0.5, 0.0), 1.0);
    case ActKind::LeakyRelu: return x > 0.0 ? x : p.a * x;
    case ActKind::Elu: return x > 0.0 ? x : p.a * std::expm1(x);
  }
  return 0.0;
}

inline double derivative(const ActivationParams& p, double x) {
  switch (p.kind) {
    case ActKind::Sigmoid: return sig(x) * sig(-x);
    case ActKind::Tanh: return 4.0 * sig(2.0 * x) * sig(-2.0 * x);
    case ActKind::Silu: return sig(x) * (1.0 + x * sig(-x));
    case ActKind::Clip: return x > p.a && x < p.b ? 1.0 : 0.0;
    case ActKind::HardSigmoid: {
      const double u = p.a * x + p.b;
      return u > 0.0 && u < 1.0 ? p.a : 0.0;
    }
    case ActKind::HardSwish: return x < -3.0 ? 0.0 : x <= 3.0 ? x / 3.0 + 0.5 : 1.0;
    case ActKind::LeakyRelu: return x > 0.0 ? 1.0 : p.a;
    case ActKind::Elu: return x > 0.0 ? 1.0 : p.a * std::exp(x);
  }
  return 0.0;
}

}  // namespace act_detail

// in: x  out: y (may be x's buffer)
template <class T>
class Activation final : public Kernel {
 public:
  explicit Activation(ActivationParams p) : p_(p) {}
  const char* name() const override { return "ref.activation"; }
  void run(const StepContext&) override {
    const T* x = in<T>(0);
    T* y = out<T>(0);
    for (int64_t i = 0; i < p_.n; ++i) y[i] = static_cast<T>(act_detail::value(p_, static_cast<double>(x[i])));
  }

 private:
  ActivationParams p_;
};

// in: x, dy  out: dx = dy f'(x) (may be dy's buffer)
template <class T>
class ActivationBwd final : public Kernel {
 public:
  explicit ActivationBwd(ActivationParams p) : p_(p) {}
  const char* name() const override { return "ref.activation_bwd"; }
  void run(const StepContext&) override {
    const T* x = in<T>(0);
    const T* dy = in<T>(1);
    T* dx = out<T>(0);
    for (int64_t i = 0; i < p_.n; ++i)
      dx[i] = static_cast<T>(static_cast<double>(dy[i]) * act_detail::derivative(p_, static_cast<double>(x[i])));
  }

 private:
  ActivationParams p_;
};

}  // namespace memfit::kernels::ref
