// Hand-written embedding kernels (ops/embedding/params.hpp states the
// semantics; out-of-range ids give NaN rows forward and are dropped
// backward). The table and its gradient are f32; act is the storage type of
// the activation: the forward output y (f32: rows copied with memcpy; bf16:
// each element rounded once, nearest even), the backward input dy (bf16
// widened exactly). bf16 needs the AVX-512 loops (simd::make_for): nullptr
// without them. bf16_table (bf16 master weights): the table is bf16, its
// rows copied (bf16 y) or widened exactly (f32 y), on any CPU.
//
// The backward is deterministic: every element of dtable is the f32 sum of
// its dy elements in ascending id position, whatever the thread count, and
// equals the reference bit for bit. After the table is zeroed, threads own
// disjoint blocks of dtable (row ranges x 16-column ranges) and each scans
// all ids for those in its rows: no atomics, no scratch, and repeated ids
// (padding, frequent tokens) still spread over the threads by columns.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "ops/embedding/params.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_embedding(const EmbeddingParams& p, ElemType act = ElemType::F32,
                                       bool bf16_table = false);
std::unique_ptr<Kernel> make_embedding_bwd(const EmbeddingParams& p, ElemType act = ElemType::F32);

}  // namespace memfit::kernels::cpu
