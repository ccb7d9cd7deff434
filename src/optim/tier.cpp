// The tier pass (memfit/tier.hpp).
#include "memfit/tier.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "memfit/op_registry.hpp"
#include "memfit/optim.hpp"

namespace memfit {
namespace {

bool chosen(const Value& v, const TierOptions& o) {
  if (v.tiered || v.bytes() == 0) return false;
  switch (v.cls) {
    case VClass::Param: return v.trainable ? o.params : o.frozen;
    case VClass::OptState: return o.state;
    default: return false;
  }
}

}  // namespace

TierResult tier_values(Graph& g, const TierOptions& o) {
  TierResult r;
  if (!o.any()) return r;
  std::vector<bool> pick(g.num_values(), false);
  for (size_t v = 0; v < g.num_values(); ++v) {
    const Value& val = g.value(static_cast<ValueId>(v));
    if (!chosen(val, o)) continue;
    if (val.is_output) throw GraphError("'" + val.name + "' is an output of the step and cannot be tiered");
    pick[v] = true;
  }

  // Updates over several parameters that read a tiered value: one per
  // parameter, each right where the combined one was.
  for (size_t k = 0; k < g.num_nodes(); ++k) {
    const Node& n = g.node(static_cast<NodeId>(k));
    if (!op_def(n.op).traits.updates_parameters || n.attrs.i("count", 1) <= 1) continue;
    bool reads = false;
    for (ValueId v : n.inputs) reads = reads || pick[static_cast<size_t>(v)];
    if (!reads) continue;
    const size_t before = g.num_nodes();
    const std::vector<NodeId> parts = split_update(g, static_cast<NodeId>(k), "tiering the parameters or their state");
    std::vector<NodeId> order;
    for (size_t j = 0; j < before; ++j) {
      order.push_back(static_cast<NodeId>(j));
      if (j == k)
        for (size_t i = 1; i < parts.size(); ++i) order.push_back(parts[i]);
    }
    g.reorder(order);
    k += parts.size() - 1;
  }

  // Each tiered value's readers, in schedule order.
  const size_t nn = g.num_nodes();
  std::vector<std::vector<NodeId>> readers(g.num_values());
  for (size_t k = 0; k < nn; ++k) {
    const Node& n = g.node(static_cast<NodeId>(k));
    for (ValueId v : n.inputs)
      if (pick[static_cast<size_t>(v)] &&
          (readers[static_cast<size_t>(v)].empty() || readers[static_cast<size_t>(v)].back() != static_cast<NodeId>(k)))
        readers[static_cast<size_t>(v)].push_back(static_cast<NodeId>(k));
  }
  // New nodes to run before / after each existing node.
  std::vector<std::vector<NodeId>> before(nn), after(nn);
  for (size_t v = 0; v < pick.size(); ++v) {  // (the copies made below are not picked)
    if (!pick[v]) continue;
    const std::vector<NodeId> rs = readers[v];
    const ValueId home = static_cast<ValueId>(v);
    g.value(home).tiered = true;
    ++r.values;
    r.bytes += g.value(home).bytes();
    int copies = 0;
    for (size_t i = 0; i < rs.size();) {
      size_t j = i + 1;
      while (j < rs.size() && rs[j] - rs[j - 1] <= o.gap) ++j;
      // Readers rs[i, j) share one copy.
      const Node& first = g.node(rs[i]);
      const std::string layer = first.layer;
      const Phase phase = first.phase;
      const ValueId copy = g.add1("tier_load", {home}, {}, layer, phase);
      g.value(copy).name = g.value(home).name + "@tier" + std::to_string(copies++);
      before[static_cast<size_t>(rs[i])].push_back(static_cast<NodeId>(g.num_nodes() - 1));
      ++r.loads;
      bool written = false;
      for (size_t m = i; m < j; ++m) {
        Node& n = g.node(rs[m]);
        written = written || op_def(n.op).traits.updates_parameters;
        for (ValueId& in : n.inputs)
          if (in == home) in = copy;
      }
      if (written) {
        const Node& last = g.node(rs[j - 1]);
        const std::string llayer = last.layer;
        const Phase lphase = last.phase;
        g.add_node("tier_store", {copy, home}, {}, llayer, lphase);
        after[static_cast<size_t>(rs[j - 1])].push_back(static_cast<NodeId>(g.num_nodes() - 1));
        ++r.stores;
      }
      i = j;
    }
  }
  std::vector<NodeId> order;
  order.reserve(g.num_nodes());
  for (size_t k = 0; k < nn; ++k) {
    for (NodeId b : before[k]) order.push_back(b);
    order.push_back(static_cast<NodeId>(k));
    for (NodeId a : after[k]) order.push_back(a);
  }
  g.reorder(order);
  return r;
}

}  // namespace memfit
