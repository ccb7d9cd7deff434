// Gradient sharding, ZeRO stage 2 (memfit/optim.hpp shard_gradients): one
// grad_reduce node per trainable parameter, right after the last backward
// node that touches its gradient; the gradients this rank does not own
// become transients that end there.
#include <algorithm>
#include <string>
#include <vector>

#include "memfit/op_registry.hpp"
#include "memfit/optim.hpp"

namespace memfit {

int shard_gradients(Graph& g, int shard, int shards) {
  if (shards < 2) return 0;
  if (shard < 0 || shard >= shards)
    throw GraphError("gradient sharding: shard " + std::to_string(shard) + " of " + std::to_string(shards));
  size_t update = g.num_nodes();
  for (size_t k = 0; k < g.num_nodes(); ++k) {
    const Node& n = g.node(static_cast<NodeId>(k));
    if (op_def(n.op).traits.accumulates_gradients)
      throw GraphError("sharded gradients are sent to their owner during backward, so they cannot wait for gradient "
                       "accumulation's micro-batches: drop --accumulate or --shard-gradients");
    if (n.phase == Phase::Update && update == g.num_nodes()) update = k;
  }
  const std::vector<ValueId> ps = updated_params(g);
  const std::vector<size_t> b = shard_bounds(g, shards);
  // Where each gradient is last touched before the update.
  std::vector<int64_t> last(g.num_values(), -1);
  for (size_t k = 0; k < update; ++k) {
    const Node& n = g.node(static_cast<NodeId>(k));
    for (ValueId v : n.inputs) last[static_cast<size_t>(v)] = static_cast<int64_t>(k);
    for (ValueId v : n.outputs) last[static_cast<size_t>(v)] = static_cast<int64_t>(k);
  }
  const size_t old = g.num_nodes();
  std::vector<std::vector<NodeId>> after(old);  // the reduce nodes to run after node k
  for (size_t i = 0; i < ps.size(); ++i) {
    const int owner = static_cast<int>(std::upper_bound(b.begin(), b.end(), i) - b.begin()) - 1;
    const ValueId grad = g.value(ps[i]).grad;
    const int64_t at = last[static_cast<size_t>(grad)];
    if (at < 0) throw GraphError("gradient sharding: no backward node makes " + g.value(ps[i]).name + "'s gradient");
    Attrs a;
    a.set("root", int64_t(owner));
    g.add_node("grad_reduce", {grad}, std::move(a), g.value(ps[i]).name, Phase::Backward);
    after[static_cast<size_t>(at)].push_back(static_cast<NodeId>(g.num_nodes() - 1));
    // Not this rank's: planned from its first write to its reduce.
    if (owner != shard && g.value(grad).cls == VClass::ParamGrad) g.value(grad).cls = VClass::Transient;
  }
  std::vector<NodeId> order;
  order.reserve(g.num_nodes());
  for (size_t k = 0; k < old; ++k) {
    order.push_back(static_cast<NodeId>(k));
    for (NodeId r : after[k]) order.push_back(r);
  }
  g.reorder(order);
  return static_cast<int>(ps.size());
}

}  // namespace memfit
