// bfloat16 and IEEE half storage: conversion to and from float.
//
// bf16 is the upper 16 bits of an IEEE float32. Rounding float -> bf16 is
// round-to-nearest-even on the dropped 16 bits (what oneDNN's reorders and
// AVX512-BF16's vcvtneps2bf16 do); NaN stays NaN (quiet). bf16 -> float is
// exact. Every memfit op on bf16 storage computes in float (or wider) from
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
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) return bf16_t((u >> 16) | 0x0040u);  // quiet NaN
  const uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return bf16_t(u >> 16);
}

// x rounded to the nearest bf16 value, as a float.
inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

inline float f16_to_f32(f16_t h) { return _cvtsh_ss(h); }
inline f16_t f32_to_f16(float f) { return f16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)); }
inline float round_f16(float f) { return f16_to_f32(f32_to_f16(f)); }

// Bulk conversions (vectorised with AVX-512 where the compiler targets it).
void bf16_to_f32(const bf16_t* in, float* out, size_t n);
void f32_to_bf16(const float* in, bf16_t* out, size_t n);
void f16_to_f32(const f16_t* in, float* out, size_t n);
void f32_to_f16(const float* in, f16_t* out, size_t n);

}  // namespace memfit::kernels
