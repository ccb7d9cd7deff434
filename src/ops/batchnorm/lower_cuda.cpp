// CUDA lowering of batch normalisation (f32).
#include <stdexcept>

#include "ops/batchnorm/cuda.hpp"
#include "ops/batchnorm/params_of.hpp"
#include "runtime/kernel_table.hpp"

namespace memfit {
namespace {

kernels::BatchNormParams checked(const LoweredGraph& lg, NodeId id) {
  const Node& n = lg.node(id);
  kernels::BatchNormParams p = bn_params(lg.graph(), n);
  if (p.training && p.N * p.HW < 2)
    throw std::invalid_argument("layer '" + n.layer + "' (" + n.op +
                                "): training-mode batch norm needs more than one value per channel, got input " +
                                shape_str(shape_of(lg.graph(), n.inputs[0])) + "; use a larger batch or eval mode");
  return p;
}

}  // namespace

void register_batchnorm_cuda_kernels() {
  register_cuda_kernel("batch_norm",
                       [](const LoweredGraph& lg, NodeId id) { return kernels::cuda::batch_norm(checked(lg, id)); });
  register_cuda_kernel("batch_norm_bwd",
                       [](const LoweredGraph& lg, NodeId id) { return kernels::cuda::batch_norm_bwd(checked(lg, id)); });
}

}  // namespace memfit
