// CUDA kernels of the optimizer updates (ops/optim/cuda.cu): SGD (momentum,
// Nesterov) and Adam/AdamW with f32 parameters and f32 state, in place, the
// reference's formulas (ops/optim/ref.hpp) element by element. Gradient
// clipping sums the gradients' squares in double over fixed blocks and adds
// the blocks in order (the same scale every run), on the GPU: the step
// never waits for the host.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "ops/optim/params.hpp"

namespace memfit::kernels::cuda {

std::unique_ptr<Kernel> sgd_update(const SgdParams& p);
std::unique_ptr<Kernel> adam_update(const AdamParams& p);
// grad_accumulate  in: acc[n], g[n]; acc = g on a group's first micro-batch, else acc += g.
std::unique_ptr<Kernel> grad_accumulate(int64_t n);

}  // namespace memfit::kernels::cuda
