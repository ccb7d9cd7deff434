// What the recurrent op families (lstm, rnn) share in the graph layer: the
// FLOP count of a layer over time and the registration of the op and its
// backward through time.
#pragma once

#include <string>

#include "ops/common/op_common.hpp"

namespace memfit {

// x [N, T, I] through a recurrence with w_hh [G, H] (G: H times the gates):
// the input projection (2 N T G I) and the recurrence (2 N T G H), plus
// about 10 operations per gate element for the activations and the state.
inline double recurrent_flops(const Graph& g, const Node& n) {
  const Shape& x = in_shape(g, n, 0);
  const Shape& whh = in_shape(g, n, 2);
  const double N = double(x[0]), T = double(x[1]), I = double(x[2]), G = double(whh[0]), H = double(whh[1]);
  return 2.0 * N * T * G * (I + H) + 10.0 * N * T * G;
}

// `name` (heavy: recomputation keeps its outputs) and `name`_bwd (no
// gradient of its own): dx and dh through time cost the forward's products
// again, dw_ih and dw_hh the same once more.
inline void register_recurrent_ops(const std::string& name, decltype(OpDef::infer) infer, decltype(OpDef::grad) grad,
                                   decltype(OpDef::infer) infer_bwd) {
  OpDef f;
  f.name = name;
  f.infer = std::move(infer);
  f.grad = std::move(grad);
  f.traits.heavy = true;
  f.flops = recurrent_flops;
  register_op(f);

  OpDef b;
  b.name = name + "_bwd";
  b.infer = std::move(infer_bwd);
  b.traits.no_gradient = true;
  b.flops = [](const Graph& g, const Node& n) { return 2.0 * recurrent_flops(g, n); };
  register_op(b);
}

}  // namespace memfit
