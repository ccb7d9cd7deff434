// The activations' values and derivatives in double, as
// ops/activation/params.hpp specifies them: one definition for the
// reference kernels (ref.hpp) and the CUDA kernels (cuda.cu), so the two
// cannot drift apart. Host and device code. min and max have std::min's
// and std::max's semantics (a NaN input stays NaN through clip, unlike
// fmin/fmax).
#pragma once

#include <cmath>

#ifdef __CUDACC__
#define MEMFIT_ACT_HD __host__ __device__
#else
#define MEMFIT_ACT_HD
#endif

#include "ops/activation/params.hpp"

namespace memfit::kernels::act_formulas {

MEMFIT_ACT_HD inline double max_of(double a, double b) { return a < b ? b : a; }  // std::max
MEMFIT_ACT_HD inline double min_of(double a, double b) { return b < a ? b : a; }  // std::min
MEMFIT_ACT_HD inline double sig(double x) { return 1.0 / (1.0 + exp(-x)); }

MEMFIT_ACT_HD inline double value(const ActivationParams& p, double x) {
  switch (p.kind) {
    case ActKind::Sigmoid: return sig(x);
    case ActKind::Tanh: return tanh(x);
    case ActKind::Silu: return x * sig(x);
    case ActKind::Clip: return min_of(max_of(x, p.a), p.b);
    case ActKind::HardSigmoid: return min_of(max_of(p.a * x + p.b, 0.0), 1.0);
    case ActKind::HardSwish: return x * min_of(max_of(x / 6.0 + 0.5, 0.0), 1.0);
    case ActKind::LeakyRelu: return x > 0.0 ? x : p.a * x;
    case ActKind::Elu: return x > 0.0 ? x : p.a * expm1(x);
    case ActKind::Exp: return exp(x);
    case ActKind::Sqrt: return sqrt(x);
  }
  return 0.0;
}

MEMFIT_ACT_HD inline double derivative(const ActivationParams& p, double x) {
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
    case ActKind::Elu: return x > 0.0 ? 1.0 : p.a * exp(x);
    case ActKind::Exp: return exp(x);
    case ActKind::Sqrt: return x > 0.0 ? 0.5 / sqrt(x) : 0.0;
  }
  return 0.0;
}

}  // namespace memfit::kernels::act_formulas
