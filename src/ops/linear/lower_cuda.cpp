// CUDA lowering of linear and matmul (f32); the parameters as the reference
// lowering reads them (ops/linear/lower.cpp).
#include "ops/linear/cuda.hpp"
#include "ops/linear/params_of.hpp"
#include "runtime/kernel_table.hpp"

namespace memfit {

void register_linear_cuda_kernels() {
  register_cuda_kernel("linear", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Shape& x = shape_of(g, n.inputs[0]);
    const Shape& w = shape_of(g, n.inputs[1]);
    return kernels::cuda::linear({numel(x) / x.back(), x.back(), w[0], n.inputs.size() == 3});
  });
  register_cuda_kernel("linear_bwd_data", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Shape& dy = shape_of(g, n.inputs[0]);
    const Shape& w = shape_of(g, n.inputs[1]);
    return kernels::cuda::linear_bwd_data({numel(dy) / dy.back(), w[1], w[0], false});
  });
  register_cuda_kernel("linear_bwd_weight", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Shape& x = shape_of(g, n.inputs[0]);
    const Shape& dy = shape_of(g, n.inputs[1]);
    return kernels::cuda::linear_bwd_weight({numel(x) / x.back(), x.back(), dy.back(), n.attrs.i("bias", 0) != 0});
  });
  register_cuda_kernel("matmul", [](const LoweredGraph& lg, NodeId id) {
    return kernels::cuda::matmul(matmul_params(lg.graph(), lg.node(id)));
  });
}

}  // namespace memfit
