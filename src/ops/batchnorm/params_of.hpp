// Kernel parameters of batch normalisation from a graph node, shared by the
// reference lowering (ops/batchnorm/lower.cpp) and the fast CPU lowering
// (ops/batchnorm/lower_cpu.cpp) so the two cannot drift apart.
#pragma once

#include "memfit/graph.hpp"
#include "ops/batchnorm/params.hpp"

namespace memfit {

// x is [N, C] or [N, C, H, W]; the spatial axes fold into HW.
inline kernels::BatchNormParams bn_params(const Graph& g, const Node& n) {
  const Shape& x = g.value(n.inputs[0]).shape;
  kernels::BatchNormParams p{x[0], x[1], numel(x) / (x[0] * x[1])};
  p.eps = n.attrs.f("eps", 1e-5);
  p.momentum = n.attrs.f("momentum", 0.1);
  p.training = n.attrs.i("training", 1) != 0;
  p.update_stats = n.attrs.i("update_stats", 1) != 0;
  return p;
}

}  // namespace memfit
