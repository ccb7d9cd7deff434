// Kernel parameters of the LSTM family from a graph node, shared by the
// reference lowering (ops/lstm/lower.cpp) and the fast CPU lowering
// (ops/lstm/lower_cpu.cpp).
#pragma once

#include "memfit/graph.hpp"
#include "ops/lstm/params.hpp"

namespace memfit {

inline kernels::LstmParams lstm_params(const Graph& g, const Node& n) {
  const Shape& x = g.value(n.inputs[0]).shape;
  kernels::LstmParams p{x[0], x[1], x[2], g.value(n.inputs[2]).shape[1]};
  if (n.op == "lstm") {
    p.lengths = n.inputs.size() == 6;
  } else {
    p.lengths = n.attrs.i("lengths", 0) != 0;
    p.dy = n.attrs.i("dy", 0) != 0;
    p.dh = n.attrs.i("dh", 0) != 0;
    p.dc = n.attrs.i("dc", 0) != 0;
  }
  return p;
}

}  // namespace memfit
