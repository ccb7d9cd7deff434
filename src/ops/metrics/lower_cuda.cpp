// CUDA lowering of xent_metrics (f32 logits).
#include "ops/metrics/cuda.hpp"
#include "ops/metrics/params_of.hpp"
#include "runtime/kernel_table.hpp"

namespace memfit {

void register_metrics_cuda_kernels() {
  register_cuda_kernel("xent_metrics", [](const LoweredGraph& lg, NodeId id) {
    return kernels::cuda::xent_metrics(metrics_params(lg.graph(), lg.node(id)));
  });
}

}  // namespace memfit
