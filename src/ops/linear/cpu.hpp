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
// The matmul of f32 a and a bf16 b broadcast over the batch (a bf16 master
// weight read by an f32 product: GPT's tied head and its backward-data), c
// f32: b is widened to f32 a panel of its rows at a time into the kernel's
// scratch (about kPanelBytes), each panel's product run before the next is
// widened, so the scratch holds one panel, not the whole matrix. Rows of a
// b stored [N, K] (trans_b) are columns of c, written in place; rows of a
// b stored [K, N] are slices of the reduction, added into c. a transposed
// only for a batch of 1 (otherwise the batch folds into its rows).
// nullptr where this does not apply.
constexpr size_t kPanelBytes = size_t(4) << 20;
std::unique_ptr<Kernel> make_matmul_bf16_b(const MatmulParams& p, size_t panel_bytes = kPanelBytes);

}  // namespace memfit::kernels::cpu
