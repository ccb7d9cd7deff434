#include "memfit/rewrite.hpp"

#include <vector>

#include "memfit/op_registry.hpp"

namespace memfit {

int pool_first(Graph& g) {
  const size_t n_nodes = g.num_nodes();
  std::vector<int> readers(g.num_values(), 0);
  for (const Node& n : g.nodes())
    for (ValueId v : n.inputs) ++readers[static_cast<size_t>(v)];
  // after[p]: the op node that moves to run right after pooling node p.
  std::vector<NodeId> after(n_nodes, -1);
  std::vector<bool> moved(n_nodes, false);
  int swapped = 0;
  for (size_t p = 0; p < n_nodes; ++p) {
    Node& pool = g.node(static_cast<NodeId>(p));
    if (pool.phase != Phase::Forward || !op_def(pool.op).traits.window_max) continue;
    const ValueId x = pool.inputs[0];
    const NodeId r = g.value(x).producer;
    if (r < 0) continue;
    Node& op = g.node(r);
    if (op.phase != Phase::Forward || !op_def(op.op).traits.commutes_with_max_pool || op.inputs.size() != 1 ||
        op.outputs.size() != 1 || !op.attrs.all().empty())
      continue;
    const ValueId y = pool.outputs[0];
    if (readers[static_cast<size_t>(x)] != 1 || g.value(x).is_output || g.value(y).is_output) continue;
    // pool(op(a)) -> op(pool(a)): the pooling reads a and still makes y; the
    // op reads y and makes x, now of y's shape; y's readers read x.
    for (size_t k = p + 1; k < n_nodes; ++k)
      for (ValueId& in : g.node(static_cast<NodeId>(k)).inputs)
        if (in == y) in = x;
    pool.inputs[0] = op.inputs[0];
    op.inputs[0] = y;
    g.value(x).shape = g.value(y).shape;
    after[p] = r;
    moved[static_cast<size_t>(r)] = true;
    ++swapped;
  }
  if (!swapped) return 0;
  std::vector<NodeId> order;
  order.reserve(n_nodes);
  for (size_t k = 0; k < n_nodes; ++k) {
    if (moved[k]) continue;
    order.push_back(static_cast<NodeId>(k));
    if (after[k] >= 0) order.push_back(after[k]);
  }
  g.reorder(order);
  return swapped;
}

}  // namespace memfit
