// Kernel parameters of xent_rows / xent_rows_bwd from a graph node (input 0
// is the logits in both), shared by the reference and the fast CPU lowering.
#pragma once

#include "memfit/graph.hpp"
#include "ops/xent_rows/params.hpp"

namespace memfit {

inline kernels::XentRowsParams xent_rows_params(const Graph& g, const Node& n) {
  const Shape& z = g.value(n.inputs[0]).shape;
  return {numel(z) / z.back(), z.back(), n.attrs.f("smoothing", 0.0)};
}

}  // namespace memfit
