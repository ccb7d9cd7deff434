// Softmax over the last axis (hand-written, f32 arithmetic),
// ops/common/params_last_axis.hpp's SoftmaxParams. act = BF16: x, y, dy, dx
// are bf16, read exactly and each output rounded once. nullptr for any
// other type, and for bf16 in a build without the bf16 loads.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "ops/common/params_last_axis.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_softmax(const SoftmaxParams& p, ElemType act = ElemType::F32);
std::unique_ptr<Kernel> make_softmax_bwd(const SoftmaxParams& p, ElemType act = ElemType::F32);

}  // namespace memfit::kernels::cpu
