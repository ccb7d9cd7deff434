// CUDA lowering of softmax cross-entropy (f32).
#include "ops/loss/cuda.hpp"
#include "ops/loss/params_of.hpp"
#include "runtime/kernel_table.hpp"

namespace memfit {

void register_loss_cuda_kernels() {
  register_cuda_kernel("softmax_xent", [](const LoweredGraph& lg, NodeId id) {
    return kernels::cuda::softmax_xent(xent_params(lg.graph(), lg.node(id)));
  });
  register_cuda_kernel("softmax_xent_bwd", [](const LoweredGraph& lg, NodeId id) {
    return kernels::cuda::softmax_xent_bwd(xent_params(lg.graph(), lg.node(id)));
  });
}

}  // namespace memfit
