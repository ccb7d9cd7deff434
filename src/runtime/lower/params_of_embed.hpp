// Kernel parameters of the embedding and permute families from a graph node,
// shared by the reference lowering (runtime/lower/) and the fast CPU lowering
// (runtime/lower_cpu/), as runtime/lower/params_of.hpp is for the others.
#pragma once

#include "kernels/params_embed.hpp"
#include "memfit/graph.hpp"

namespace memfit {

// embedding (ids, table[V, D]) and embedding_bwd (ids, dy[, acc] -> dtable[V, D]):
// the ids fold into n.
inline kernels::EmbeddingParams embedding_params(const Graph& g, const Node& n) {
  const Shape& t = g.value(n.op == "embedding" ? n.inputs[1] : n.outputs[0]).shape;
  return {numel(g.value(n.inputs[0]).shape), t[0], t[1], n.op == "embedding_bwd" && n.inputs.size() == 3};
}

inline kernels::PermuteParams permute_params(const Graph& g, const Node& n) {
  return {g.value(n.inputs[0]).shape, n.attrs.ints("perm")};
}

}  // namespace memfit
