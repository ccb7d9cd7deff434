// Kernel parameters of permute from a graph node, shared by the reference
// lowering and the fast CPU lowering.
#pragma once

#include "memfit/graph.hpp"
#include "ops/permute/params.hpp"

namespace memfit {

inline kernels::PermuteParams permute_params(const Graph& g, const Node& n) {
  return {g.value(n.inputs[0]).shape, n.attrs.ints("perm")};
}

}  // namespace memfit
