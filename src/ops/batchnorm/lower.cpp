#include <stdexcept>

#include "ops/batchnorm/params_of.hpp"
#include "ops/batchnorm/ref.hpp"
#include "runtime/lower/lower_util.hpp"

namespace memfit {
namespace {

// bn_params (params_of.hpp), checked.
kernels::BatchNormParams checked_bn_params(const Graph& g, const Node& n) {
  kernels::BatchNormParams p = bn_params(g, n);
  const Shape& x = shape_of(g, n.inputs[0]);
  // The unbiased running variance divides by n - 1; like PyTorch, refuse a
  // single value per channel before any step runs.
  if (p.training && p.N * p.HW < 2)
    throw std::invalid_argument("layer '" + n.layer + "' (" + n.op +
                                "): training-mode batch norm needs more than one value per channel, got input " +
                                shape_str(x) + "; use a larger batch or eval mode");
  return p;
}

}  // namespace

void register_batchnorm_ref_kernels() {
  register_kernel("batch_norm", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    return make_ref<kernels::ref::BatchNorm>(lg, checked_bn_params(g, n));
  });
  register_kernel("batch_norm_bwd", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    return make_ref<kernels::ref::BatchNormBwd>(lg, checked_bn_params(g, n));
  });
}

}  // namespace memfit
