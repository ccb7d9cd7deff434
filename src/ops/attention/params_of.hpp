// Kernel parameters of attention and attention_bwd from a graph node, shared
// by the reference lowering and the fast CPU lowering. A graph built for
// evaluation (Graph::training false) never drops: its builder passes p = 0,
// and the lowering ignores the attribute as well.
#pragma once

#include <cmath>
#include <string>

#include "memfit/graph.hpp"
#include "ops/attention/params.hpp"

namespace memfit {

inline kernels::AttentionParams attention_params(const Graph& g, const Node& n) {
  using kernels::AttentionLayout;
  const std::string layout = n.attrs.has("layout") ? n.attrs.s("layout") : "bhtd";
  const AttentionLayout lay = layout == "packed" ? AttentionLayout::Packed
                              : layout == "bthd" ? AttentionLayout::BTHD
                                                 : AttentionLayout::BHTD;
  const Shape& q = g.value(n.inputs[0]).shape;
  kernels::AttentionParams p{};
  if (lay == AttentionLayout::Packed) {  // qkv [B, T, 3, H, D]
    p = {q[0], q[3], q[1], q[1], q[4], q[4]};
  } else {
    const Shape &k = g.value(n.inputs[1]).shape, &v = g.value(n.inputs[2]).shape;
    const size_t ah = lay == AttentionLayout::BHTD ? 1 : 2, at = 3 - ah;  // heads, rows
    p = {q[0], q[ah], q[at], k[at], q[3], v[3]};
  }
  p.layout = lay;
  p.scale = n.attrs.f("scale", 1.0 / std::sqrt(static_cast<double>(p.D)));
  p.causal = n.attrs.i("causal", 0) != 0;
  const size_t base = p.qkv_inputs() + (n.op == "attention" ? 0 : 3);  // inputs before the optional mask
  p.mask = n.inputs.size() > base;
  p.dropout = g.training ? n.attrs.f("dropout", 0.0) : 0.0;
  p.stream = static_cast<uint64_t>(n.attrs.i("stream", 0));
  return p;
}

}  // namespace memfit
