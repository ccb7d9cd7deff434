// CUDA lowering of the element-wise ops (f32).
#include "ops/eltwise/cuda.hpp"
#include "runtime/kernel_table.hpp"

namespace memfit {

void register_eltwise_cuda_kernels() {
  auto n_of = [](const LoweredGraph& lg, NodeId id) { return numel(lg.graph().value(lg.node(id).outputs[0]).shape); };
  register_cuda_kernel("relu", [=](const LoweredGraph& lg, NodeId id) { return kernels::cuda::relu({n_of(lg, id)}); });
  register_cuda_kernel("relu_bwd",
                       [=](const LoweredGraph& lg, NodeId id) { return kernels::cuda::relu_bwd({n_of(lg, id)}); });
  register_cuda_kernel("add", [=](const LoweredGraph& lg, NodeId id) { return kernels::cuda::add({n_of(lg, id)}); });
  register_cuda_kernel("scale", [=](const LoweredGraph& lg, NodeId id) {
    return kernels::cuda::scale({n_of(lg, id), lg.node(id).attrs.f("alpha")});
  });
  register_cuda_kernel("fill", [=](const LoweredGraph& lg, NodeId id) {
    return kernels::cuda::fill({n_of(lg, id), lg.node(id).attrs.f("value")});
  });
}

}  // namespace memfit
