// GELU, exact (erf) and tanh forms (hand-written, f32 arithmetic),
// ops/common/params_last_axis.hpp's GeluParams. act = BF16: every operand is
// bf16, read exactly and each output rounded once. nullptr for any other
// type, and for bf16 in a build without the bf16 loads.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "ops/common/params_last_axis.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_gelu(const GeluParams& p, ElemType act = ElemType::F32);
std::unique_ptr<Kernel> make_gelu_bwd(const GeluParams& p, ElemType act = ElemType::F32);

}  // namespace memfit::kernels::cpu
