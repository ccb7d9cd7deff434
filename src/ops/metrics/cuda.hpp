// CUDA kernel of xent_metrics (ops/metrics/cuda.cu): the reference's sums
// (ops/metrics/ref.hpp), one thread per row scanning it as the reference
// does (the first maximum wins; NaNs never do), the rows' sums added in row
// order in double.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "ops/metrics/params.hpp"

namespace memfit::kernels::cuda {

std::unique_ptr<Kernel> xent_metrics(const MetricsParams& p);  // logits, labels -> loss_sum, correct, count

}  // namespace memfit::kernels::cuda
