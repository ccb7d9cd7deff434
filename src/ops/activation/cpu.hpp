// The pointwise activations (ops/activation/params.hpp), hand-written, f32
// arithmetic. act = BF16: every operand is bf16, read exactly and each output
// rounded once. nullptr for any other type, and for bf16 in a build without
// the bf16 loads.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "ops/activation/params.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_activation(const ActivationParams& p, ElemType act = ElemType::F32);
std::unique_ptr<Kernel> make_activation_bwd(const ActivationParams& p, ElemType act = ElemType::F32);

}  // namespace memfit::kernels::cpu
