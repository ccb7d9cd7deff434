// Helpers shared by the fast CPU lowering files.
#pragma once

#include "runtime/kernel_table.hpp"

namespace memfit {

// The fast CPU kernels compute on f32 storage: true if every float input and
// output of the node is f32 (otherwise the factory returns nullptr and the
// reference kernel runs).
inline bool all_f32(const Graph& g, const Node& n) {
  for (const auto* vs : {&n.inputs, &n.outputs})
    for (ValueId v : *vs)
      if (is_float(g.value(v).dtype) && g.value(v).dtype != DType::f32) return false;
  return true;
}

}  // namespace memfit
