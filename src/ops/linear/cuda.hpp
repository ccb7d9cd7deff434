// CUDA kernels of linear and matmul (ops/linear/cuda.cu): cuBLAS products in
// fp32 (no TF32), row-major tensors given to column-major cuBLAS as their
// transposes; the bias and its gradient are memfit's own kernels.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "ops/linear/params.hpp"

namespace memfit::kernels::cuda {

std::unique_ptr<Kernel> linear(const LinearParams& p);             // x, w, b -> y = x w^T + b
std::unique_ptr<Kernel> linear_bwd_data(const LinearParams& p);    // dy, w -> dx = dy w
std::unique_ptr<Kernel> linear_bwd_weight(const LinearParams& p);  // x, dy -> dw = dy^T x, db = sum_rows dy
std::unique_ptr<Kernel> matmul(const MatmulParams& p);             // a, b -> c = op(a) op(b) per batch

}  // namespace memfit::kernels::cuda
