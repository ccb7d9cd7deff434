// Kernel parameters of xent_metrics from a graph node, shared by the
// reference and the fast CPU lowering. Rows: every axis of the logits but
// the last.
#pragma once

#include "memfit/graph.hpp"
#include "ops/metrics/params.hpp"

namespace memfit {

inline kernels::MetricsParams metrics_params(const Graph& g, const Node& n) {
  const Shape& z = g.value(n.inputs[0]).shape;
  return {numel(z) / z.back(), z.back()};
}

}  // namespace memfit
