// Vector math for the hand-written loops over simd::V (kernels/cpu/
// bf16_simd.hpp): exp and erfc in f32, lane selections, horizontal max, and
// row sums that accumulate in f32 lanes and flush to double.
//
// The functions are written once on P, the target's own vector register as
// a GCC vector type (__m512 with AVX-512, where V is P; otherwise V's parts:
// 256-bit with AVX2, 128-bit without), using only its operators, compares,
// bit casts and integer shifts, so that both builds run the same
// arithmetic; the V forms apply them part by part. Compares give integer
// lane masks (-1 or 0) and selections are bitwise, which GCC and clang both
// accept on vector types.
//
// Accuracy, f32 (tests/test_norm_kernels.cpp measures both over dense
// grids):
//  - vexp(x): Cephes' expf (Cody-Waite range reduction, degree-6
//    polynomial), within 2 ulp for x in [-87.33, 88]; 0 below -87.33 (where
//    exp is an f32 denormal: flushed), +inf above 88 (exp(88) = 1.65e38 is
//    the largest it returns), NaN for NaN.
//  - verfc(z), z >= 0: Numerical Recipes' erfcc (t = 1/(1 + z/2), erfc =
//    t exp(-z^2 + a degree-9 polynomial in t), fractional error < 1.2e-7 in
//    exact arithmetic); in f32 the rounding of -z^2 adds ~z^2 2^-24, so the
//    relative error stays below 1e-6 for z <= 3 and 2e-6 for z <= 5.
#pragma once

#include <cstdint>
#include <limits>

#include "kernels/cpu/bf16_simd.hpp"

namespace memfit::kernels::cpu::simd {

namespace math {

#if MEMFIT_BF16_SIMD
using P = __m512;
#else
using P = Part;
#endif
using PI = int32_t __attribute__((vector_size(sizeof(P))));  // lane masks and integer lanes

#if MEMFIT_BF16_SIMD
inline P splat(float f) { return _mm512_set1_ps(f); }
#else
inline P splat(float f) { return part_of(f); }  // a broadcast (bf16_simd.hpp)
#endif
// Lanes of a where m is set (-1), else of b.
inline P select(PI m, P a, P b) { return (P)((m & (PI)a) | (~m & (PI)b)); }
inline P pabs(P x) { return (P)((PI)x & 0x7fffffff); }
inline P pmax(P a, P b) { return select(a < b, b, a); }

// exp(x); see the top of the file.
inline P exp_p(P x) {
  const P hi = splat(88.0f), lo = splat(-87.33654f);
  const P c = select(x > hi, hi, select(x < lo, lo, x));  // NaN stays NaN
  // n = round(c log2 e), by adding and removing 1.5 * 2^23 (whose ulp is 1):
  // t's low mantissa bits then hold n.
  const P magic = splat(12582912.0f);
  const P t = c * splat(1.44269504088896341f) + magic;
  const P n = t - magic;
  P r = c - n * splat(0.693359375f);  // c - n ln 2, ln 2 in two parts
  r = r - n * splat(-2.12194440e-4f);
  P p = splat(1.9875691500e-4f);
  p = p * r + splat(1.3981999507e-3f);
  p = p * r + splat(8.3334519073e-3f);
  p = p * r + splat(4.1665795894e-2f);
  p = p * r + splat(1.6666665459e-1f);
  p = p * r + splat(5.0000001201e-1f);
  p = p * (r * r) + r + splat(1.0f);
  const PI two_n = ((PI)t - (PI)magic + 127) << 23;  // 2^n, n in [-126, 127]
  P y = p * (P)two_n;
  y = select(x < lo, splat(0.0f), y);
  return select(x > hi, splat(std::numeric_limits<float>::infinity()), y);
}

// exp(x) - 1 without cancellation near 0: x (1 + x/2 + ... + x^7/8!) for
// |x| < 1/2 (the series' remainder is below 1.1e-8 of the result there),
// exp_p(x) - 1 elsewhere (|exp(x) - 1| >= 0.39 there, so exp's error grows
// by at most a factor 2.6).
inline P expm1_p(P x) {
  P q = splat(1.0f / 40320.0f);
  q = q * x + splat(1.0f / 5040.0f);
  q = q * x + splat(1.0f / 720.0f);
  q = q * x + splat(1.0f / 120.0f);
  q = q * x + splat(1.0f / 24.0f);
  q = q * x + splat(1.0f / 6.0f);
  q = q * x + splat(0.5f);
  q = q * x + splat(1.0f);
  return select(pabs(x) < splat(0.5f), x * q, exp_p(x) - splat(1.0f));
}

// erfc(z) for z >= 0; see the top of the file.
inline P erfc_p(P z) {
  const P t = splat(1.0f) / (splat(1.0f) + splat(0.5f) * z);
  P q = splat(0.17087277f);
  q = q * t + splat(-0.82215223f);
  q = q * t + splat(1.48851587f);
  q = q * t + splat(-1.13520398f);
  q = q * t + splat(0.27886807f);
  q = q * t + splat(-0.18628806f);
  q = q * t + splat(0.09678418f);
  q = q * t + splat(0.37409196f);
  q = q * t + splat(1.00002368f);
  q = q * t + splat(-1.26551223f);
  return t * exp_p(q - z * z);
}

// f applied to each part of v.
template <class F>
inline V map(V v, F&& f) {
#if MEMFIT_BF16_SIMD
  return f(v);
#else
  for (int i = 0; i < kParts; ++i) v.p[i] = f(v.p[i]);
  return v;
#endif
}
// f applied to the parts of a and b, pairwise.
template <class F>
inline V map2(V a, V b, F&& f) {
#if MEMFIT_BF16_SIMD
  return f(a, b);
#else
  for (int i = 0; i < kParts; ++i) a.p[i] = f(a.p[i], b.p[i]);
  return a;
#endif
}

}  // namespace math

inline V vexp(V x) { return math::map(x, [](math::P p) { return math::exp_p(p); }); }
inline V verfc(V z) { return math::map(z, [](math::P p) { return math::erfc_p(p); }); }
inline V vmax(V a, V b) { return math::map2(a, b, [](math::P x, math::P y) { return math::pmax(x, y); }); }

// The lanes of v where m is set, b elsewhere.
inline V blend(Mask m, V v, V b) {
#if MEMFIT_BF16_SIMD
  return _mm512_mask_blend_ps(m, b, v);
#else
  if (m == Mask(0xffff)) return v;
  for (int j = 0; j < kLanes; ++j)
    if (!(m >> j & 1)) v.p[j / kPartLanes][j % kPartLanes] = b.p[j / kPartLanes][j % kPartLanes];
  return v;
#endif
}
// The lanes of v where m is set, 0 elsewhere.
inline V keep(Mask m, V v) { return blend(m, v, zero()); }

// Largest of the 16 lanes.
inline float hmax(V v) {
  float f[16];
  store(f, v);
  float m = f[0];
  for (int j = 1; j < 16; ++j) m = f[j] > m ? f[j] : m;
  return m;
}

// Row sums: K sums over [0, len) of term(i, mask) (16 lanes from i; lanes
// past len are dropped, whatever term gives there), accumulated in f32
// lanes and flushed to double every kFlushVectors vectors, so no f32
// accumulator holds more than 64 terms (relative error <= 64 2^-24 = 3.8e-6
// of the sum of |term|), then the lanes are added in double in a fixed
// order. The result does not depend on the thread count.
constexpr int kFlushVectors = 64;

template <int K, class F>
inline void row_sums(int64_t len, double (&out)[K], F&& term) {
  double s[K][16] = {};
  V acc[K];
  for (int k = 0; k < K; ++k) acc[k] = zero();
  int count = 0;
  for_row(len, [&](int64_t i, Mask m) {
    V t[K];
    term(i, m, t);
    for (int k = 0; k < K; ++k) acc[k] = acc[k] + keep(m, t[k]);
    if (++count == kFlushVectors) {
      for (int k = 0; k < K; ++k) {
        add_to_double(s[k], acc[k]);
        acc[k] = zero();
      }
      count = 0;
    }
  });
  for (int k = 0; k < K; ++k) {
    add_to_double(s[k], acc[k]);
    out[k] = 0.0;
    for (int j = 0; j < 16; ++j) out[k] += s[k][j];
  }
}

// One sum: term(i, mask) returns the lanes.
template <class F>
inline double row_sum_d(int64_t len, F&& term) {
  double out[1];
  row_sums<1>(len, out, [&](int64_t i, Mask m, V* t) { t[0] = term(i, m); });
  return out[0];
}

}  // namespace memfit::kernels::cpu::simd
