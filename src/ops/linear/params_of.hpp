// Kernel parameters of the linear and matmul ops from a graph node, shared by the
// reference lowering (ops/linear/lower.cpp) and the fast CPU lowering
// (ops/linear/lower_cpu.cpp) so the two cannot drift apart.
#pragma once

#include "memfit/graph.hpp"
#include "ops/linear/params.hpp"

namespace memfit {

// a[..., M, K] x b[..., K, N] (trans flags swap an operand's last two axes);
// the leading axes fold into B, and an operand without them is broadcast.
inline kernels::MatmulParams matmul_params(const Graph& g, const Node& n) {
  const Shape& as = g.value(n.inputs[0]).shape;
  const Shape& bs = g.value(n.inputs[1]).shape;
  const Shape& cs = g.value(n.outputs[0]).shape;
  kernels::MatmulParams p;
  p.trans_a = n.attrs.i("trans_a", 0) != 0;
  p.trans_b = n.attrs.i("trans_b", 0) != 0;
  p.M = cs[cs.size() - 2];
  p.N = cs.back();
  p.K = p.trans_a ? as[as.size() - 2] : as.back();
  p.B = numel(cs) / (p.M * p.N);
  p.a_batch = as.size() == 2 ? 1 : p.B;
  p.b_batch = bs.size() == 2 ? 1 : p.B;
  return p;
}

}  // namespace memfit
