// CUDA lowering of conv2d and its backward ops (f32); the parameters as the
// reference lowering reads them (ops/conv/lower.cpp).
#include "ops/conv/cuda.hpp"
#include "ops/conv/params_of.hpp"
#include "runtime/kernel_table.hpp"

namespace memfit {

void register_conv_cuda_kernels() {
  register_cuda_kernel("conv2d", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    return kernels::cuda::conv2d(conv_params(n, shape_of(g, n.inputs[0]), shape_of(g, n.inputs[1]),
                                             shape_of(g, n.outputs[0]), n.inputs.size() == 3));
  });
  register_cuda_kernel("conv2d_bwd_data", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    return kernels::cuda::conv2d_bwd_data(
        conv_params(n, n.attrs.ints("x_shape"), shape_of(g, n.inputs[1]), shape_of(g, n.inputs[0]), false));
  });
  register_cuda_kernel("conv2d_bwd_weight", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    return kernels::cuda::conv2d_bwd_weight(conv_params(n, shape_of(g, n.inputs[0]), n.attrs.ints("w_shape"),
                                                        shape_of(g, n.inputs[1]), n.attrs.i("bias", 0) != 0));
  });
}

}  // namespace memfit
