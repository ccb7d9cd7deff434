// CUDA lowering of max, average and global average pooling (f32); the
// parameters as the reference lowering reads them (ops/pool/lower.cpp).
#include "ops/pool/cuda.hpp"
#include "ops/pool/params_of.hpp"
#include "runtime/kernel_table.hpp"

namespace memfit {

void register_pool_cuda_kernels() {
  register_cuda_kernel("max_pool2d", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    return kernels::cuda::max_pool2d(pool_params(n, shape_of(g, n.inputs[0]), shape_of(g, n.outputs[0])));
  });
  register_cuda_kernel("max_pool2d_bwd", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    return kernels::cuda::max_pool2d_bwd(pool_params(n, n.attrs.ints("x_shape"), shape_of(g, n.inputs[0])));
  });
  register_cuda_kernel("avg_pool2d", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    return kernels::cuda::avg_pool2d(pool_params(n, shape_of(g, n.inputs[0]), shape_of(g, n.outputs[0])));
  });
  register_cuda_kernel("avg_pool2d_bwd", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    return kernels::cuda::avg_pool2d_bwd(pool_params(n, n.attrs.ints("x_shape"), shape_of(g, n.inputs[0])));
  });
  register_cuda_kernel("global_avg_pool", [](const LoweredGraph& lg, NodeId id) {
    const Shape& x = shape_of(lg.graph(), lg.node(id).inputs[0]);
    return kernels::cuda::global_avg_pool({x[0], x[1], x[2] * x[3]});
  });
  register_cuda_kernel("global_avg_pool_bwd", [](const LoweredGraph& lg, NodeId id) {
    const Shape& x = lg.node(id).attrs.ints("x_shape");
    return kernels::cuda::global_avg_pool_bwd({x[0], x[1], x[2] * x[3]});
  });
}

}  // namespace memfit
