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
  // The copies: readers of a tiered value within o.gap nodes of each other
  // share one (positions are the nodes' places in the schedule so far).
  struct Copy {
    ValueId home = kNone, copy = kNone;
    NodeId load = -1, store = -1;  // the tier_load node, the tier_store node (-1: not written)
    size_t first = 0, last = 0;    // its first and last reader
    int prev = -1;                 // the home's copy before it (-1: none)
  };
  std::vector<Copy> copies;
  const bool async = o.ahead > 0;
  const Attrs io_attrs = async ? Attrs{{"async", int64_t(1)}} : Attrs{};
  for (size_t v = 0; v < pick.size(); ++v) {  // (the copies made below are not picked)
    if (!pick[v]) continue;
    const std::vector<NodeId> rs = readers[v];
    const ValueId home = static_cast<ValueId>(v);
    g.value(home).tiered = true;
    ++r.values;
    r.bytes += g.value(home).bytes();
    int made = 0;
    for (size_t i = 0; i < rs.size();) {
      size_t j = i + 1;
      while (j < rs.size() && rs[j] - rs[j - 1] <= o.gap) ++j;
      // Readers rs[i, j) share one copy.
      Copy c;
      c.home = home;
      c.first = static_cast<size_t>(rs[i]);
      c.last = static_cast<size_t>(rs[j - 1]);
      c.prev = made ? static_cast<int>(copies.size()) - 1 : -1;
      const Node& first = g.node(rs[i]);
      const std::string layer = first.layer;
      const Phase phase = first.phase;
      c.copy = g.add1("tier_load", {home}, io_attrs, layer, phase);
      c.load = static_cast<NodeId>(g.num_nodes() - 1);
      g.value(c.copy).name = g.value(home).name + "@tier" + std::to_string(made++);
      ++r.loads;
      bool written = false;
      for (size_t m = i; m < j; ++m) {
        Node& n = g.node(rs[m]);
        written = written || op_def(n.op).traits.updates_parameters;
        for (ValueId& in : n.inputs)
          if (in == home) in = c.copy;
      }
      if (written) {
        const Node& last = g.node(rs[j - 1]);
        const std::string llayer = last.layer;
        const Phase lphase = last.phase;
        g.add_node("tier_store", {c.copy, home}, io_attrs, llayer, lphase);
        c.store = static_cast<NodeId>(g.num_nodes() - 1);
        ++r.stores;
      }
      copies.push_back(c);
      i = j;
    }
  }

  // Where the new nodes run: before / after each existing node, and after
  // the last one (tail). Synchronous: a copy is read right before its first
  // reader and written right after its last. Asynchronous (o.ahead
  // places of use ahead): the places where copies are first read, in
  // order, are the pipeline's stages; a copy's read is queued at the stage
  // o.ahead before its own (but after the write of the home's previous
  // copy, which the I/O thread then does first), waited for right before
  // its first reader; a write is queued right after the last reader and
  // waited for o.ahead stages later, so that the I/O thread works while
  // the step computes.
  std::vector<std::vector<NodeId>> fetch(nn), waits(nn), after(nn);
  std::vector<NodeId> tail;
  auto wait_node = [&](const Copy& c, size_t at) {
    const Node& n = g.node(static_cast<NodeId>(at < nn ? at : c.last));
    const std::string layer = n.layer;
    const Phase phase = n.phase;
    g.add_node("tier_wait", {c.copy}, {}, layer, phase);
    return static_cast<NodeId>(g.num_nodes() - 1);
  };
  // The step's closing optimizer update (the nodes of phase Update at its
  // end) runs once per step, the nodes before it once per micro-batch: a
  // copy the update reads is queued within it, never before.
  size_t update_begin = nn;
  while (update_begin > 0 && g.node(static_cast<NodeId>(update_begin - 1)).phase == Phase::Update) --update_begin;
  std::vector<size_t> stages;
  for (const Copy& c : copies) stages.push_back(c.first);
  std::sort(stages.begin(), stages.end());
  stages.erase(std::unique(stages.begin(), stages.end()), stages.end());
  auto stage_of = [&](size_t pos) {  // the index of the first stage at or after pos
    return static_cast<size_t>(std::lower_bound(stages.begin(), stages.end(), pos) - stages.begin());
  };
  for (const Copy& c : copies) {
    if (!async) {
      fetch[c.first].push_back(c.load);
      if (c.store >= 0) after[c.last].push_back(c.store);
      continue;
    }
    const size_t s = stage_of(c.first);
    size_t at = stages[s >= static_cast<size_t>(o.ahead) ? s - static_cast<size_t>(o.ahead) : 0];
    if (c.prev >= 0 && copies[static_cast<size_t>(c.prev)].store >= 0) at = std::max(at, copies[static_cast<size_t>(c.prev)].last + 1);
    if (c.first >= update_begin) at = std::max(at, update_begin);
    fetch[at].push_back(c.load);
    waits[c.first].push_back(wait_node(c, c.first));
    if (c.store < 0) continue;
    after[c.last].push_back(c.store);
    const size_t ws = stage_of(c.last + 1) + static_cast<size_t>(o.ahead) - 1;
    if (ws < stages.size()) waits[stages[ws]].push_back(wait_node(c, stages[ws]));
    else tail.push_back(wait_node(c, nn));
  }
  std::vector<NodeId> order;
  order.reserve(g.num_nodes());
  for (size_t k = 0; k < nn; ++k) {
    for (NodeId b : fetch[k]) order.push_back(b);
    for (NodeId w : waits[k]) order.push_back(w);
    order.push_back(static_cast<NodeId>(k));
    for (NodeId a : after[k]) order.push_back(a);
  }
  for (NodeId t : tail) order.push_back(t);
  g.reorder(order);
  return r;
}

}  // namespace memfit
