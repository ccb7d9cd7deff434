// bfloat16 and IEEE half storage: conversion to and from float.
//
// bf16 is the upper 16 bits of an IEEE float32. Rounding float -> bf16 is
// round-to-nearest-even on the dropped 16 bits (what oneDNN's reorders and
// AVX512-BF16's vcvtneps2bf16 do); NaN stays NaN (quiet); f32 denormal
// inputs (below 2^-126) become zero of the same sign, as vcvtneps2bf16 and
// oneDNN's reorders make them, so a value converts the same wherever it
// sits in a buffer. bf16 -> float is exact. Every memfit op on bf16 storage computes in float (or wider) from
// the exact float values of its bf16 inputs and rounds each output element
// once.
//
// f16 (IEEE binary16) conversions use F16C (vcvtps2ph / vcvtph2ps, round to
// nearest even): values beyond 65504 become inf, which dynamic loss scaling
// detects.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <immintrin.h>

namespace memfit::kernels {

using bf16_t = uint16_t;
using f16_t = uint16_t;

inline float bf16_to_f32(bf16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline bf16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0) return bf16_t((u >> 16) & 0x8000u);  // f32 denormals flush to (signed) zero
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) return bf16_t((u >> 16) | 0x0040u);  // quiet NaN
  const uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return bf16_t(u >> 16);
}

// x rounded to the nearest bf16 value, as a float.
inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

#if defined(__F16C__)
inline float f16_to_f32(f16_t h) { return _cvtsh_ss(h); }
inline f16_t f32_to_f16(float f) { return f16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)); }
#else
// The same conversions without F16C (builds for other targets, sanitizer
// builds): exact widening; narrowing rounds to nearest even, overflows to
// inf from 65520 up, keeps NaN a (quiet) NaN.
inline float f16_to_f32(f16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    const float f = static_cast<float>(mant) * 5.9604644775390625e-8f;  // mant * 2^-24, exact
    std::memcpy(&u, &f, 4);
    u |= sign;
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline f16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  if (u >= 0x7f800000u) return f16_t(sign | (u > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (u >= 0x477ff000u) return f16_t(sign | 0x7c00u);  // >= 65520: inf
  if (u < 0x38800000u) {                               // below 2^-14: subnormal or zero
    float a;
    std::memcpy(&a, &u, 4);
    const float m = a * 16777216.0f;  // in units of 2^-24, exact
    uint32_t r = static_cast<uint32_t>(m);
    const float frac = m - static_cast<float>(r);
    if (frac > 0.5f || (frac == 0.5f && (r & 1u))) ++r;
    return f16_t(sign | r);
  }
  u += 0xc8000fffu + ((u >> 13) & 1u);  // rebias the exponent by -112, round to nearest even
  return f16_t(sign | (u >> 13));
}
#endif
inline float round_f16(float f) { return f16_to_f32(f32_to_f16(f)); }

// Bulk conversions (vectorised with AVX-512 where the compiler targets it).
void bf16_to_f32(const bf16_t* in, float* out, size_t n);
void f32_to_bf16(const float* in, bf16_t* out, size_t n);
void f16_to_f32(const f16_t* in, float* out, size_t n);
void f32_to_f16(const float* in, f16_t* out, size_t n);

}  // namespace memfit::kernels
