// CUDA kernels of max, average and global average pooling (ops/pool/cuda.cu),
// f32, with the reference's semantics (ops/pool/ref.hpp): the same index
// workspace, ties to the first element, NaNs winning; the backward passes
// gather (each input element sums the windows that chose it, in the
// reference's order), so they need no atomics and give the same bits every
// run.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "ops/pool/params.hpp"

namespace memfit::kernels::cuda {

std::unique_ptr<Kernel> max_pool2d(const PoolParams& p);             // x -> y, idx
std::unique_ptr<Kernel> max_pool2d_bwd(const PoolParams& p);         // dy, idx -> dx
std::unique_ptr<Kernel> avg_pool2d(const PoolParams& p);             // x -> y
std::unique_ptr<Kernel> avg_pool2d_bwd(const PoolParams& p);         // dy -> dx
std::unique_ptr<Kernel> global_avg_pool(const GlobalPoolParams& p);  // x[N,C,H,W] -> y[N,C]
std::unique_ptr<Kernel> global_avg_pool_bwd(const GlobalPoolParams& p);  // dy[N,C] -> dx

}  // namespace memfit::kernels::cuda
