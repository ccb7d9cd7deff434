// Kernel parameters of the RNN family from a graph node, shared by the
// reference lowering (ops/rnn/lower.cpp) and the fast CPU lowering
// (ops/rnn/lower_cpu.cpp).
#pragma once

#include "memfit/graph.hpp"
#include "ops/rnn/params.hpp"

namespace memfit {

inline kernels::RnnParams rnn_params(const Graph& g, const Node& n) {
  const Shape& x = g.value(n.inputs[0]).shape;
  kernels::RnnParams p{x[0], x[1], x[2], g.value(n.inputs[2]).shape[1]};
  const std::string& c = n.attrs.s("cell");
  p.cell = c == "gru" ? kernels::RnnCell::Gru : c == "relu" ? kernels::RnnCell::Relu : kernels::RnnCell::Tanh;
  if (n.op == "rnn_bwd") {
    p.dy = n.attrs.i("dy", 0) != 0;
    p.dh = n.attrs.i("dh", 0) != 0;
  }
  return p;
}

}  // namespace memfit
