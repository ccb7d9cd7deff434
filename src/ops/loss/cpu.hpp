// Softmax cross-entropy (hand-written, f32 storage, double accumulation as the
// reference does). act = BF16: the logits (forward input) and dlogits
// (backward output) are bf16; the loss and the saved probabilities stay f32.
// bf16 dlogits must not share the probabilities' buffer (the f32 kernel's
// in-place use): the element sizes differ.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "ops/loss/params.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_softmax_xent(const XentParams& p, ElemType act = ElemType::F32);
std::unique_ptr<Kernel> make_softmax_xent_bwd(const XentParams& p, ElemType act = ElemType::F32);

}  // namespace memfit::kernels::cpu
