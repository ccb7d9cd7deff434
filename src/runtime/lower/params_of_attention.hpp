// Kernel parameters of attention and attention_bwd from a graph node, shared
// by the reference lowering and the fast CPU lowering. A graph built for
// evaluation (Graph::training false) never drops: its builder passes p = 0,
// and the lowering ignores the attribute as well.
#pragma once

#include <cmath>

#include "kernels/params_attention.hpp"
#include "memfit/graph.hpp"

namespace memfit {

inline kernels::AttentionParams attention_params(const Graph& g, const Node& n) {
  const Shape &q = g.value(n.inputs[0]).shape, &k = g.value(n.inputs[1]).shape, &v = g.value(n.inputs[2]).shape;
  kernels::AttentionParams p{q[0], q[1], q[2], k[2], q[3], v[3]};
  p.scale = n.attrs.f("scale", 1.0 / std::sqrt(static_cast<double>(q[3])));
  p.causal = n.attrs.i("causal", 0) != 0;
  const size_t base = n.op == "attention" ? 3 : 6;  // inputs before the optional mask
  p.mask = n.inputs.size() > base;
  p.dropout = g.training ? n.attrs.f("dropout", 0.0) : 0.0;
  p.stream = static_cast<uint64_t>(n.attrs.i("stream", 0));
  return p;
}

}  // namespace memfit
