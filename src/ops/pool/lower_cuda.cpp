// CUDA lowering of max, average and global average pooling (f32); the
// parameters as the reference lowering reads them (ops/pool/lower.cpp).
#include "ops/pool/cuda.hpp"
#include "ops/pool/params_of.hpp"
#include "runtime/kernel_table.hpp"

namespace memfit {
namespace {

using PoolKernel = std::unique_ptr<kernels::Kernel> (*)(const kernels::PoolParams&);

// A forward pooling op (in: x, out: y) and its backward (in: dy, the input
// shape in the attribute x_shape).
void register_window_pool(const std::string& op, PoolKernel fwd, PoolKernel bwd) {
  register_cuda_kernel(op, [fwd](const LoweredGraph& lg, NodeId id) {
    const Node& n = lg.node(id);
    return fwd(pool_params(n, shape_of(lg.graph(), n.inputs[0]), shape_of(lg.graph(), n.outputs[0])));
  });
  register_cuda_kernel(op + "_bwd", [bwd](const LoweredGraph& lg, NodeId id) {
    const Node& n = lg.node(id);
    return bwd(pool_params(n, n.attrs.ints("x_shape"), shape_of(lg.graph(), n.inputs[0])));
  });
}

}  // namespace

void register_pool_cuda_kernels() {
  register_window_pool("max_pool2d", kernels::cuda::max_pool2d, kernels::cuda::max_pool2d_bwd);
  register_window_pool("avg_pool2d", kernels::cuda::avg_pool2d, kernels::cuda::avg_pool2d_bwd);
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
