// CUDA kernels of the mean softmax cross-entropy (ops/loss/cuda.cu), f32
// values with double sums, the reference's formulas (ops/loss/ref.hpp): one
// warp per row; the mean over rows is summed in row order from the planned
// scratch, so the loss has the same bits every run.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "ops/loss/params.hpp"

namespace memfit::kernels::cuda {

std::unique_ptr<Kernel> softmax_xent(const XentParams& p);      // logits, labels -> loss, probs
std::unique_ptr<Kernel> softmax_xent_bwd(const XentParams& p);  // probs, labels, dloss -> dlogits

}  // namespace memfit::kernels::cuda
