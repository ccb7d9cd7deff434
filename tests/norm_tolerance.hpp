// GELU's f32 error model, shared by the tests of the GELU kernels
// (test_ops_norm.cpp, test_norm_kernels.cpp).
//
// The fast kernels evaluate exp(a) with a = -x^2/2 (inside erfc, exact form)
// or a = -2u (tanh form) computed in f32: a few roundings of a, each moving
// exp(a) by |a| 2^-24 relative, then the roundings of the polynomials
// (degree 6 in exp, 9 in erfc), a division and the products. So an f32 GELU
// value is within (16 + 4 |a|) 2^-24 relative, and a gradient within that
// of the sum of |terms| of gelu' (which cancels near x = -0.75). Measured
// over x in [-10, 10] (0.0001 apart, both forms, value and gradient): at
// most 6.4 ulp where |a| < 2, and 2.4 |a| ulp beyond; for |x| <= 6, |a| <=
// 25 and the bound is <= 7e-6.
#pragma once

#include <cmath>

namespace memfit::testing {

// Relative error bound of the f32 GELU kernels at x.
inline double gelu_f32_rel(double x, bool tanh) {
  const double a = tanh ? 2.0 * std::sqrt(2.0 / M_PI) * std::abs(x + 0.044715 * x * x * x) : 0.5 * x * x;
  return (16.0 + 4.0 * a) * 0x1p-24;
}

// gelu'(x)'s two terms, |each|, summed: exact Phi + |x phi|, tanh s + |2 x s (1 - s) u'|.
inline double gelu_grad_terms(double x, bool tanh) {
  if (!tanh) return 0.5 * std::erfc(-x / std::sqrt(2.0)) + std::abs(x) * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
  const double c = std::sqrt(2.0 / M_PI), u = c * (x + 0.044715 * x * x * x), s = 1.0 / (1.0 + std::exp(-2.0 * u));
  return s + std::abs(2.0 * x * s * (1.0 - s) * c * (1.0 + 3 * 0.044715 * x * x));
}

}  // namespace memfit::testing
