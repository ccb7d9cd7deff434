// Kernel parameters of the embedding family from a graph node,
// shared by the reference lowering (ops/embedding/lower.cpp) and the fast CPU
// lowering (ops/embedding/lower_cpu.cpp).
#pragma once

#include "memfit/graph.hpp"
#include "ops/embedding/params.hpp"

namespace memfit {

// embedding (ids, table[V, D]) and embedding_bwd (ids, dy[, acc] -> dtable[V, D]):
// the ids fold into n.
inline kernels::EmbeddingParams embedding_params(const Graph& g, const Node& n) {
  const Shape& t = g.value(n.op == "embedding" ? n.inputs[1] : n.outputs[0]).shape;
  return {numel(g.value(n.inputs[0]).shape), t[0], t[1], n.op == "embedding_bwd" && n.inputs.size() == 3};
}

// gather_rows (table[V, ...]) and gather_rows_bwd (dy -> dtable[V, ...]).
inline kernels::GatherRowsParams gather_rows_params(const Graph& g, const Node& n) {
  const Shape& t = g.value(n.op == "gather_rows" ? n.inputs[0] : n.outputs[0]).shape;
  return {n.attrs.ints("rows"), t[0], numel(t) / t[0]};
}

}  // namespace memfit
