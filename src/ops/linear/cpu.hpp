// oneDNN linear (inner product) and batched matmul kernels, row-major.
// Factories return nullptr when oneDNN has no implementation.
// act = BF16 (linear only): x, y, dy, dx are bf16; w is rounded to bf16 (RNE)
// into the kernel's scratch before each product; the bias stays f32 (not
// rounded); dw and db are f32. bf16_weights (bf16 master weights, act BF16
// only): w is a bf16 parameter, read as it is (no copy). The matmul is f32
// only.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "ops/linear/params.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_linear(const LinearParams& p, ElemType act = ElemType::F32, bool bf16_weights = false);
std::unique_ptr<Kernel> make_linear_bwd_data(const LinearParams& p, ElemType act = ElemType::F32,
                                             bool bf16_weights = false);
std::unique_ptr<Kernel> make_linear_bwd_weight(const LinearParams& p, ElemType act = ElemType::F32);
std::unique_ptr<Kernel> make_matmul(const MatmulParams& p);

}  // namespace memfit::kernels::cpu
