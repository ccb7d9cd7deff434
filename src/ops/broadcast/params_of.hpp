// Kernel parameters of add_broadcast and sum_leading from a graph node,
// shared by the reference and the fast CPU lowering: S is the broadcast
// operand's size (add: input 1; sum: the output; expand: the input), R the
// rows (of input 0; expand: of the output).
#pragma once

#include "memfit/graph.hpp"
#include "ops/broadcast/params.hpp"

namespace memfit {

inline kernels::BroadcastParams broadcast_params(const Graph& g, const Node& n) {
  if (n.op == "expand_leading") {
    const int64_t S = numel(g.value(n.inputs[0]).shape);
    return {numel(g.value(n.outputs[0]).shape) / S, S};
  }
  const int64_t S = numel(g.value(n.op == "sum_leading" ? n.outputs[0] : n.inputs[1]).shape);
  return {numel(g.value(n.inputs[0]).shape) / S, S};
}

}  // namespace memfit
