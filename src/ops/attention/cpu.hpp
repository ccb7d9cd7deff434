// Fused scaled dot-product attention on the CPU (hand-written, f32; bf16 and
// f16 storage run it between conversions, runtime/mixed.hpp), as
// ops/attention/params.hpp specifies. Tiled: a block of queries against
// a block of keys at a time, with an online softmax in the forward and the
// probabilities recomputed from lse in the backward. Scratch: one set of
// tiles per thread, never a [T, S] matrix.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "ops/attention/params.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_attention(const AttentionParams& p);
std::unique_ptr<Kernel> make_attention_bwd(const AttentionParams& p);

}  // namespace memfit::kernels::cpu
