// Layer normalisation over the last axis (hand-written, f32 arithmetic),
// ops/common/params_last_axis.hpp's LayerNormParams. act = BF16: x, y, dy, dx
// are stored as bf16 (read exactly, the same arithmetic, each output rounded
// once); gamma, beta, the statistics and dgamma, dbeta stay f32. nullptr for
// any other type, and for bf16 in a build without the bf16 loads.
// The backward kernel's scratch holds per-chunk partial sums of dgamma and
// dbeta: 2 D floats for each chunk of rows (64 rows a chunk from 1024 rows
// on: ~1/32 of x's f32 bytes; fewer than 32 chunks below).
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "ops/common/params_last_axis.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_layer_norm(const LayerNormParams& p, ElemType act = ElemType::F32);
std::unique_ptr<Kernel> make_layer_norm_bwd(const LayerNormParams& p, ElemType act = ElemType::F32);

}  // namespace memfit::kernels::cpu
