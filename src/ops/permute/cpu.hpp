// Hand-written permute (ops/permute/params.hpp), for elements of 1, 2, 4
// or 8 bytes: a pure copy, so one kernel serves every storage type (f32,
// bf16, f16, i32, u8) bit for bit.
//
// The permutation is first simplified: axes of extent 1 are dropped and
// input axes that stay neighbours in the output are merged. Then
//  - nothing left to permute: one copy, split across the threads;
//  - the last axis stays last: rows of the last axis copied with memcpy;
//  - otherwise: a tiled transpose between the input's last axis and the
//    output's (32 x 32 element tiles, so both sides read and write whole
//    cache lines), for each index of the remaining axes.
// Threads split the output in contiguous ranges of rows (or tile bands).
// Returns nullptr for more than kMaxPermuteRank axes after simplification
// (the reference kernel then serves).
#pragma once

#include <cstddef>
#include <memory>

#include "kernels/kernel.hpp"
#include "ops/permute/params.hpp"

namespace memfit::kernels::cpu {

constexpr size_t kMaxPermuteRank = 12;

std::unique_ptr<Kernel> make_permute(const PermuteParams& p, size_t elem_bytes);

}  // namespace memfit::kernels::cpu
