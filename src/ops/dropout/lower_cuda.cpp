// CUDA lowering of dropout (f32).
#include "ops/dropout/cuda.hpp"
#include "ops/dropout/params_of.hpp"
#include "runtime/kernel_table.hpp"

namespace memfit {

void register_dropout_cuda_kernels() {
  register_cuda_kernel("dropout", [](const LoweredGraph& lg, NodeId id) {
    return kernels::cuda::dropout(dropout_params(lg.graph(), lg.node(id)));
  });
  register_cuda_kernel("dropout_bwd", [](const LoweredGraph& lg, NodeId id) {
    return kernels::cuda::dropout_bwd(dropout_params(lg.graph(), lg.node(id)));
  });
}

}  // namespace memfit
