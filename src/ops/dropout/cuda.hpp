// CUDA kernels of dropout (ops/dropout/cuda.cu): the counter-based mask of
// ops/dropout/params.hpp drawn on the GPU by the same arithmetic
// (memfit/rng.hpp is host and device code), so a GPU run keeps exactly the
// elements a CPU run keeps.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "ops/dropout/params.hpp"

namespace memfit::kernels::cuda {

std::unique_ptr<Kernel> dropout(const DropoutParams& p);      // x -> y, mask
std::unique_ptr<Kernel> dropout_bwd(const DropoutParams& p);  // dy, mask -> dx

}  // namespace memfit::kernels::cuda
