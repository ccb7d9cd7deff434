// Element-wise kernels: relu through oneDNN eltwise, the rest hand-written
// (memory-bound loops). All may run in place where the op allows it (relu,
// add, scale: y over x/a; relu_bwd: dx over dy). act = BF16: every operand is
// bf16, computed in f32 and rounded once (a + b, alpha x rounded; relu and
// relu_bwd are exact). make_fill is f32 only.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "ops/eltwise/params.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_relu(const EltwiseParams& p, ElemType act = ElemType::F32);
std::unique_ptr<Kernel> make_relu_bwd(const EltwiseParams& p, ElemType act = ElemType::F32);
std::unique_ptr<Kernel> make_add(const EltwiseParams& p, ElemType act = ElemType::F32);
std::unique_ptr<Kernel> make_scale(const EltwiseParams& p, ElemType act = ElemType::F32);
std::unique_ptr<Kernel> make_fill(const FillParams& p);

}  // namespace memfit::kernels::cpu
