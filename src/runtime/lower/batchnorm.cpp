#include <stdexcept>

#include "kernels/ref/batchnorm.hpp"
#include "runtime/lower/lower_util.hpp"

namespace memfit {
namespace {

// x is [N, C] or [N, C, H, W]; the spatial axes fold into HW.
kernels::BatchNormParams bn_params(const Graph& g, const Node& n) {
  const Shape& x = shape_of(g, n.inputs[0]);
  kernels::BatchNormParams p{x[0], x[1], numel(x) / (x[0] * x[1])};
  p.eps = n.attrs.f("eps", 1e-5);
  p.momentum = n.attrs.f("momentum", 0.1);
  p.training = n.attrs.i("training", 1) != 0;
  p.update_stats = n.attrs.i("update_stats", 1) != 0;
  // The unbiased running variance divides by n - 1; like PyTorch, refuse a
  // single value per channel before any step runs.
  if (p.training && p.N * p.HW < 2)
    throw std::invalid_argument("layer '" + n.layer + "' (" + n.op +
                                "): training-mode batch norm needs more than one value per channel, got input " +
                                shape_str(x) + "; use a larger batch or eval mode");
  return p;
}

}  // namespace

void register_batchnorm_kernels() {
  register_kernel("batch_norm", [](const Graph& g, const Node& n, Backend b) {
    return make_ref<kernels::ref::BatchNorm>(b, bn_params(g, n));
  });
  register_kernel("batch_norm_bwd", [](const Graph& g, const Node& n, Backend b) {
    return make_ref<kernels::ref::BatchNormBwd>(b, bn_params(g, n));
  });
}

}  // namespace memfit
