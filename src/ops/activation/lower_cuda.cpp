// CUDA lowering of activation and activation_bwd (f32).
#include "ops/activation/cuda.hpp"
#include "ops/activation/params_of.hpp"
#include "runtime/kernel_table.hpp"

namespace memfit {

void register_activation_cuda_kernels() {
  register_cuda_kernel("activation", [](const LoweredGraph& lg, NodeId id) {
    return kernels::cuda::activation(activation_params(lg.graph(), lg.node(id)));
  });
  register_cuda_kernel("activation_bwd", [](const LoweredGraph& lg, NodeId id) {
    return kernels::cuda::activation_bwd(activation_params(lg.graph(), lg.node(id)));
  });
}

}  // namespace memfit
