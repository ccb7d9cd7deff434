// Kernel parameters of layer_norm, gelu and softmax (and their backward ops)
// from a graph node, shared by the reference lowerings (ops/<family>/lower.cpp)
// and the fast CPU lowerings (ops/<family>/lower_cpu.cpp) so the two cannot
// drift apart.
// Input 0 (x, or y for softmax_bwd) is viewed as [R, D], D its last axis.
#pragma once

#include "memfit/graph.hpp"
#include "ops/common/params_last_axis.hpp"

namespace memfit {

inline kernels::LayerNormParams layer_norm_params(const Graph& g, const Node& n) {
  const Shape& x = g.value(n.inputs[0]).shape;
  kernels::LayerNormParams p{numel(x) / x.back(), x.back()};
  p.eps = n.attrs.f("eps", 1e-5);
  return p;
}

inline kernels::GeluParams gelu_params(const Graph& g, const Node& n) {
  kernels::GeluParams p{numel(g.value(n.inputs[0]).shape)};
  p.tanh = n.attrs.has("approximate") && n.attrs.s("approximate") == "tanh";
  return p;
}

inline kernels::SoftmaxParams softmax_params(const Graph& g, const Node& n) {
  const Shape& x = g.value(n.inputs[0]).shape;
  return {numel(x) / x.back(), x.back()};
}

}  // namespace memfit
