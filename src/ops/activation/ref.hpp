// Scalar reference kernels of the pointwise activations (the test oracle),
// as ops/activation/params.hpp specifies. T is float or double; the
// arithmetic is double for either.
#pragma once

#include <algorithm>
#include <cmath>

#include "kernels/kernel.hpp"
#include "ops/activation/params.hpp"
#include "ops/activation/ref_formulas.hpp"

namespace memfit::kernels::ref {

// The formulas (ops/activation/ref_formulas.hpp), shared with the CUDA kernels.
namespace act_detail = act_formulas;

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
