// oneDNN linear (inner product) and batched matmul kernels, f32, row-major.
// Factories return nullptr when oneDNN has no implementation.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "kernels/params.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_linear(const LinearParams& p);
std::unique_ptr<Kernel> make_linear_bwd_data(const LinearParams& p);
std::unique_ptr<Kernel> make_linear_bwd_weight(const LinearParams& p);
std::unique_ptr<Kernel> make_matmul(const MatmulParams& p);

}  // namespace memfit::kernels::cpu
