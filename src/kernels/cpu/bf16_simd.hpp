// Sixteen-lane helpers for the hand-written bf16 loops (activations stored as
// bf16, arithmetic in f32; kernels/bf16.hpp states the rounding rules).
//
// A bf16 -> f32 load is exact: 16 halves are zero-extended to 32 bits and
// shifted into the upper half (vpmovzxwd + vpslld). An f32 -> bf16 store
// rounds to nearest even with vcvtneps2bf16 (AVX512-BF16); without that
// extension the same rounding is done with integer arithmetic (as
// kernels/bf16.hpp's scalar f32_to_bf16). vcvtneps2bf16 treats denormal
// inputs as zero: an f32 result below 2^-126 in magnitude is stored as a
// signed zero instead of the nearest bf16 denormal.
//
// Counted forms (n < 16 lanes) use masked loads and stores, so the tail of a
// row needs no scalar loop and never touches memory past it.
//
// The bf16 kernels need AVX-512 (F, BW, VL); built without it
// MEMFIT_BF16_SIMD is 0, the helpers are absent and the factories of the
// hand-written bf16 kernels return nullptr.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/bf16.hpp"
#include "kernels/cpu/parallel.hpp"

namespace memfit::kernels::cpu::simd {

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define MEMFIT_BF16_SIMD 1
#else
#define MEMFIT_BF16_SIMD 0
#endif

#if MEMFIT_BF16_SIMD

constexpr int64_t kLanes = 16;

// The lowest n lanes (0 <= n <= 16).
inline __mmask16 lanes(int64_t n) { return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1u); }

inline __m512 load(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
// (The maskz forms with a full mask compile to the plain instructions; the
// plain intrinsics' _mm512_undefined trips GCC 12's -Wmaybe-uninitialized.)
inline __m512 widen(__m256i h) {
  const __mmask16 all = 0xffff;
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all, _mm512_maskz_cvtepu16_epi32(all, h), 16));
}
inline __m512 load(const bf16_t* p) { return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline __m512 load(const bf16_t* p, __mmask16 m) { return widen(_mm256_maskz_loadu_epi16(m, p)); }

// Sixteen floats rounded to bf16 (RNE), packed into 256 bits.
inline __m256i narrow(__m512 v) {
#if defined(__AVX512BF16__)
  return (__m256i)_mm512_cvtneps_pbh(v);
#else
  const __mmask16 all = 0xffff;
  const __m512i u = _mm512_castps_si512(v);
  const __m512i hi = _mm512_maskz_srli_epi32(all, u, 16);
  const __m512i lsb = _mm512_maskz_and_epi32(all, hi, _mm512_set1_epi32(1));
  const __m512i bias = _mm512_maskz_add_epi32(all, lsb, _mm512_set1_epi32(0x7fff));
  __m512i r = _mm512_maskz_srli_epi32(all, _mm512_maskz_add_epi32(all, u, bias), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x40));
  return _mm512_maskz_cvtepi32_epi16(all, r);
#endif
}

inline void store(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
inline void store(float* p, __m512 v, __mmask16 m) { _mm512_mask_storeu_ps(p, m, v); }
inline void store(bf16_t* p, __m512 v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow(v)); }
inline void store(bf16_t* p, __m512 v, __mmask16 m) { _mm256_mask_storeu_epi16(p, m, narrow(v)); }

// Sum of the 16 lanes of an f32 accumulator, pairwise in a fixed order.
inline float hsum(__m512 v) {
  alignas(64) float f[16];
  _mm512_store_ps(f, v);
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) f[j] += f[j + w];
  return f[0];
}

// Adds the 16 f32 lanes of v to s[0..15] in double.
// (Through memory: GCC 12 warns about its own _mm512_undefined in the
// 256-bit extracts.)
inline void add_to_double(double* s, __m512 v) {
  alignas(64) float f[16];
  _mm512_store_ps(f, v);
#pragma omp simd
  for (int j = 0; j < 16; ++j) s[j] += static_cast<double>(f[j]);
}

// body(i, mask) over [0, n) in steps of 16 lanes: full vectors first, split
// statically across a thread team when the loop is large (parallel.hpp's
// rule), then the masked tail on the calling thread.
template <class F>
inline void for_lanes(int64_t n, F&& body) {
  const int64_t full = n / kLanes;
  parallel_for(full, n, [&](int64_t b) { body(b * kLanes, __mmask16(0xffff)); });
  if (n % kLanes) body(full * kLanes, lanes(n % kLanes));
}

#endif

}  // namespace memfit::kernels::cpu::simd
