// Kernel parameters of dropout and dropout_bwd from a graph node, shared by
// the reference lowering and the fast CPU lowering. The stream attribute
// holds the layer-name hash bit-cast to int64; the batch is the leading axis.
#pragma once

#include "memfit/graph.hpp"
#include "ops/dropout/params.hpp"

namespace memfit {

inline kernels::DropoutParams dropout_params(const Graph& g, const Node& n) {
  const Shape& s = g.value(n.outputs[0]).shape;
  const int64_t n_el = numel(s);
  const int64_t rows = s.empty() || s[0] <= 0 ? 1 : s[0];
  return {n_el, n.attrs.f("p"), static_cast<uint64_t>(n.attrs.i("stream")), rows};
}

}  // namespace memfit
