// Kernel parameters of softmax_xent and softmax_xent_bwd from a graph node,
// shared by the reference lowering (ops/loss/lower.cpp) and the fast CPU
// lowering (ops/loss/lower_cpu.cpp).
#pragma once

#include "memfit/graph.hpp"
#include "ops/loss/params.hpp"

namespace memfit {

// logits (forward input 0) and probs (backward input 0) are both [N, C].
inline kernels::XentParams xent_params(const Graph& g, const Node& n) {
  const Shape& z = g.value(n.inputs[0]).shape;
  return {z[0], z[1], n.attrs.f("smoothing", 0.0)};
}

}  // namespace memfit
