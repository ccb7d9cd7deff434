// Sixteen-lane helpers for the hand-written loops that serve both storage
// types of an activation, f32 and bf16 (arithmetic always in f32;
// kernels/bf16.hpp states the rounding rules). A loop is written once,
// templated on the storage type T, against simd::V (sixteen f32 lanes) and
// the load/store overloads below: for float they are plain vector loads and
// stores, for bf16_t the conversions.
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
// The bf16 loads and stores need AVX-512 (F, BW, VL). Built without it,
// MEMFIT_BF16_SIMD is 0, only the f32 forms exist (V is then a struct of
// the target's own vectors, the masked forms lane loops), and make_for
// gives no bf16 kernels.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>

#include "kernels/bf16.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/kernel.hpp"

namespace memfit::kernels::cpu::simd {

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define MEMFIT_BF16_SIMD 1
#else
#define MEMFIT_BF16_SIMD 0
#endif

constexpr int64_t kLanes = 16;

// Scalar storage conversions, for loops templated on the storage type.
inline float to_f32(float v) { return v; }
inline float to_f32(bf16_t v) { return bf16_to_f32(v); }
template <class T>
inline T from_f32(float v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else return f32_to_bf16(v);
}

// K<float> or K<bf16_t> made from args, for activations stored as act
// (bf16 only where MEMFIT_BF16_SIMD); nullptr for any other type.
template <template <class> class K, class... A>
std::unique_ptr<Kernel> make_for(ElemType act, A&&... args) {
#if MEMFIT_BF16_SIMD
  if (act == ElemType::BF16) return std::make_unique<K<bf16_t>>(std::forward<A>(args)...);
#endif
  if (act == ElemType::F32) return std::make_unique<K<float>>(std::forward<A>(args)...);
  return nullptr;
}

#if MEMFIT_BF16_SIMD

using V = __m512;
using Mask = __mmask16;

// The lowest n lanes (0 <= n <= 16).
inline Mask lanes(int64_t n) { return n >= 16 ? Mask(0xffff) : Mask((1u << n) - 1u); }

inline V zero() { return _mm512_setzero_ps(); }
inline V set1(float f) { return _mm512_set1_ps(f); }
inline V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }

inline V load(const float* p) { return _mm512_loadu_ps(p); }
inline V load(const float* p, Mask m) { return _mm512_maskz_loadu_ps(m, p); }
// (The maskz forms with a full mask compile to the plain instructions; the
// plain intrinsics' _mm512_undefined trips GCC 12's -Wmaybe-uninitialized.)
inline V widen(__m256i h) {
  const Mask all = 0xffff;
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all, _mm512_maskz_cvtepu16_epi32(all, h), 16));
}
inline V load(const bf16_t* p) { return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline V load(const bf16_t* p, Mask m) { return widen(_mm256_maskz_loadu_epi16(m, p)); }

// Sixteen floats rounded to bf16 (RNE), packed into 256 bits.
inline __m256i narrow(V v) {
#if defined(__AVX512BF16__)
  return (__m256i)_mm512_cvtneps_pbh(v);
#else
  const Mask all = 0xffff;
  const __m512i u = _mm512_castps_si512(v);
  const __m512i hi = _mm512_maskz_srli_epi32(all, u, 16);
  const __m512i lsb = _mm512_maskz_and_epi32(all, hi, _mm512_set1_epi32(1));
  const __m512i bias = _mm512_maskz_add_epi32(all, lsb, _mm512_set1_epi32(0x7fff));
  __m512i r = _mm512_maskz_srli_epi32(all, _mm512_maskz_add_epi32(all, u, bias), 16);
  const Mask nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x40));
  return _mm512_maskz_cvtepi32_epi16(all, r);
#endif
}

inline void store(float* p, V v) { _mm512_storeu_ps(p, v); }
inline void store(float* p, V v, Mask m) { _mm512_mask_storeu_ps(p, m, v); }
inline void store(bf16_t* p, V v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow(v)); }
inline void store(bf16_t* p, V v, Mask m) { _mm256_mask_storeu_epi16(p, m, narrow(v)); }

// Sum of the 16 lanes of an f32 accumulator, pairwise in a fixed order.
inline float hsum(V v) {
  alignas(64) float f[16];
  _mm512_store_ps(f, v);
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) f[j] += f[j + w];
  return f[0];
}

// body(i, mask) over [0, n) in steps of 16 lanes: full vectors first, split
// statically across a thread team when the loop is large (parallel.hpp's
// rule), then the masked tail on the calling thread.
template <class F>
inline void for_lanes(int64_t n, F&& body) {
  const int64_t full = n / kLanes;
  parallel_for(full, n, [&](int64_t b) { body(b * kLanes, Mask(0xffff)); });
  if (n % kLanes) body(full * kLanes, lanes(n % kLanes));
}

#else

// Sixteen lanes as parts of the widest vector the target has (GCC generic
// vectors): a 64-byte generic vector would live in memory without AVX-512,
// while a struct of register-sized parts is kept in registers.
#if defined(__AVX__)
using Part = float __attribute__((vector_size(32)));
#else
using Part = float __attribute__((vector_size(16)));
#endif
using UnalignedPart = float __attribute__((vector_size(sizeof(Part)), aligned(4), may_alias));
constexpr int kParts = 64 / sizeof(Part), kPartLanes = kLanes / kParts;
struct V {
  Part p[kParts];
};
using Mask = uint16_t;

#define MEMFIT_V_OP(op)                                         \
  inline V operator op(V a, V b) {                              \
    for (int i = 0; i < kParts; ++i) a.p[i] = a.p[i] op b.p[i]; \
    return a;                                                   \
  }
MEMFIT_V_OP(+)
MEMFIT_V_OP(-)
MEMFIT_V_OP(*)
MEMFIT_V_OP(/)
#undef MEMFIT_V_OP

inline Mask lanes(int64_t n) { return n >= 16 ? Mask(0xffff) : Mask((1u << n) - 1u); }

// f in every lane of a part, by a broadcast instruction. `Part{} + f` is an
// addition of zero that GCC must keep (it turns -0 into +0) and then a
// shuffle: in a product's inner loop (a set1 per row and k) the two took
// ports from the multiply-adds, and a plain loop over the lanes GCC turned
// into eight inserts. With the broadcast, the attention's AVX2 kernels at
// gpt-char's shape went from 10.8 to 9.4 ms (forward) and 20.1 to 17.1 ms
// (backward).
inline Part part_of(float f) {
#if defined(__AVX__)
  return Part(_mm256_set1_ps(f));
#else
  return Part(_mm_set1_ps(f));
#endif
}

inline V zero() { return V{}; }
inline V set1(float f) {
  V v;
  for (int i = 0; i < kParts; ++i) v.p[i] = part_of(f);
  return v;
}
inline V fmadd(V a, V b, V c) {
  for (int i = 0; i < kParts; ++i) a.p[i] = a.p[i] * b.p[i] + c.p[i];
  return a;
}

inline V load(const float* p) {
  V v;
  for (int i = 0; i < kParts; ++i) v.p[i] = *reinterpret_cast<const UnalignedPart*>(p + i * kPartLanes);
  return v;
}
inline V load(const float* p, Mask m) {
  if (m == Mask(0xffff)) return load(p);
  V v{};
  for (int j = 0; j < kLanes; ++j)
    if (m >> j & 1) v.p[j / kPartLanes][j % kPartLanes] = p[j];
  return v;
}
// The parts are stored in ascending address order: GCC otherwise often
// stores the upper part first, which made the batch-norm loops that write
// whole cache lines about 25% slower (AVX2). Each empty asm reads the part
// just stored and "changes" the next one, so the next store must come after.
inline void store(float* p, V v) {
  for (int i = 0; i < kParts; ++i) {
    auto* q = reinterpret_cast<UnalignedPart*>(p + i * kPartLanes);
    *q = v.p[i];
    if (i + 1 < kParts) asm("" : "+x"(v.p[i + 1]) : "m"(*q));
  }
}
inline void store(float* p, V v, Mask m) {
  if (m == Mask(0xffff)) return store(p, v);
  for (int j = 0; j < kLanes; ++j)
    if (m >> j & 1) p[j] = v.p[j / kPartLanes][j % kPartLanes];
}

#endif

// Adds the 16 f32 lanes of v to s[0..15] in double.
// (Through memory: GCC 12 warns about its own _mm512_undefined in the
// 256-bit extracts.)
inline void add_to_double(double* s, V v) {
  alignas(64) float f[16];
#if MEMFIT_BF16_SIMD
  _mm512_store_ps(f, v);
#else
  std::memcpy(f, v.p, sizeof f);
#endif
#pragma omp simd
  for (int j = 0; j < 16; ++j) s[j] += static_cast<double>(f[j]);
}

// body(i, mask) over [0, n) in steps of 16 lanes on the calling thread: the
// full vectors (the mask a constant, which the compiler folds away), then
// the masked tail.
template <class F>
inline void for_row(int64_t n, F&& body) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) body(i, Mask(0xffff));
  if (i < n) body(i, lanes(n - i));
}

// body(i, mask) over [0, n) for an element-wise kernel: chunks of 4096
// elements split across threads (parallel.hpp), each walked by for_row.
template <class F>
inline void for_chunks(int64_t n, F&& body) {
  constexpr int64_t kChunk = 4096;
  parallel_for((n + kChunk - 1) / kChunk, n, [&](int64_t c) {
    const int64_t b = c * kChunk;
    for_row(std::min(kChunk, n - b), [&](int64_t i, Mask m) { body(b + i, m); });
  });
}

// Sum over a row of term(r[i]) (f32 values), as the compiler's omp simd
// reduction orders it: the f32 kernels' row sums. Always inlined, so that
// every copy of a loop (serial, and outlined for a thread team) vectorises
// with term's captures in registers: an out-of-line copy that had to reload a
// capture each element was left scalar, summing in a different order.
template <class F>
[[gnu::always_inline]] inline float row_sum(const float* r, int64_t len, F&& term) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < len; ++i) s += term(r[i]);
  return s;
}

}  // namespace memfit::kernels::cpu::simd
