// Dropout with the counter-based mask of params.hpp (hand-written). act =
// BF16: x, y, dy, dx are bf16, y = round(x * scale) where kept (scale the f32
// 1/(1-p)); the u8 mask is unchanged.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "ops/dropout/params.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_dropout(const DropoutParams& p, ElemType act = ElemType::F32);
std::unique_ptr<Kernel> make_dropout_bwd(const DropoutParams& p, ElemType act = ElemType::F32);

}  // namespace memfit::kernels::cpu
