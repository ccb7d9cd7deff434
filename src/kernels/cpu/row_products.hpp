// Products of a few rows against a small matrix that stays in cache, for
// the recurrences of the RNN kernels (ops/lstm, ops/rnn): kRows samples go
// through their steps together on one thread, and each step's recurrent
// products share every load of the weight rows while kRows x kTile vectors
// of sums stay in registers (one sample alone is a chain of dependent
// multiply-adds through memory, bound by their latency).
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/bf16_simd.hpp"

namespace memfit::kernels::cpu {

// Rows per group; vectors of sums per row and weight load (2 with 32
// vector registers; 1 where a vector is two AVX2 halves, of which there are
// 16).
constexpr int kRowGroup = 4;
constexpr int kRowTile = MEMFIT_BF16_SIMD ? 2 : 1;

namespace detail {

inline simd::Mask tail_lanes(int64_t n) { return n <= 0 ? simd::Mask(0) : simd::lanes(n); }

template <bool kAccumulate, bool kFull>
void rows_tile(const float* const (&a)[kRowGroup], int64_t K, const float* B, int64_t C,
               float* const (&out)[kRowGroup], int64_t j0) {
  constexpr int64_t kW = simd::kLanes;
  // Every loop over acc unrolled whole, so that the sums live in registers
  // (rolled, GCC kept acc in memory and stored each sum after every
  // multiply-add).
  simd::Mask m[kRowTile];
#pragma GCC unroll 2
  for (int v = 0; v < kRowTile; ++v) m[v] = kFull ? simd::Mask(0xffff) : tail_lanes(C - j0 - v * kW);
  simd::V acc[kRowGroup][kRowTile];
#pragma GCC unroll 8
  for (int s = 0; s < kRowGroup; ++s)
#pragma GCC unroll 2
    for (int v = 0; v < kRowTile; ++v) acc[s][v] = kAccumulate ? simd::load(out[s] + j0 + v * kW, m[v]) : simd::zero();
  for (int64_t k = 0; k < K; ++k) {
    simd::V w[kRowTile];
#pragma GCC unroll 2
    for (int v = 0; v < kRowTile; ++v) w[v] = simd::load(B + k * C + j0 + v * kW, m[v]);
#pragma GCC unroll 8
    for (int s = 0; s < kRowGroup; ++s) {
      const simd::V ak = simd::set1(a[s][k]);
#pragma GCC unroll 2
      for (int v = 0; v < kRowTile; ++v) acc[s][v] = simd::fmadd(ak, w[v], acc[s][v]);
    }
  }
#pragma GCC unroll 8
  for (int s = 0; s < kRowGroup; ++s)
#pragma GCC unroll 2
    for (int v = 0; v < kRowTile; ++v) simd::store(out[s] + j0 + v * kW, acc[s][v], m[v]);
}

}  // namespace detail

// out[s][0:C] = (kAccumulate ? out[s][0:C] : 0) + sum over k < K of
// a[s][k] * B[k][0:C], for the kRowGroup rows s (B row-major, C wide; out
// rows apart from a and B). k ascending, one multiply-add per lane per k:
// each row's sums are those of the same product done one row at a time. A
// row given twice (the same a and out) is computed twice, to the same
// values.
template <bool kAccumulate = false>
void rows_times(const float* const (&a)[kRowGroup], int64_t K, const float* B, int64_t C,
                float* const (&out)[kRowGroup]) {
  constexpr int64_t kStep = kRowTile * simd::kLanes;
  int64_t j0 = 0;
  for (; j0 + kStep <= C; j0 += kStep) detail::rows_tile<kAccumulate, true>(a, K, B, C, out, j0);
  if (j0 < C) detail::rows_tile<kAccumulate, false>(a, K, B, C, out, j0);
}

// The groups of N samples, and sample s of group g: the last sample repeated
// where N ends within the group.
inline int64_t row_groups(int64_t N) { return (N + kRowGroup - 1) / kRowGroup; }
inline int64_t group_row(int64_t g, int s, int64_t N) { return std::min(g * kRowGroup + s, N - 1); }
// True for the first of a group's repeats of a sample (its steps run once).
inline bool first_of_row(const int64_t (&ns)[kRowGroup], int s) { return s == 0 || ns[s] != ns[s - 1]; }

}  // namespace memfit::kernels::cpu
