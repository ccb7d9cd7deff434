#include "memfit/recompute.hpp"

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "memfit/op_registry.hpp"

namespace memfit {
namespace {

bool is_fwd_value(const Graph& g, ValueId v) {
  const Value& val = g.value(v);
  return val.cls == VClass::Transient && val.producer >= 0 && g.node(val.producer).phase == Phase::Forward;
}

bool is_heavy(const std::string& op) { return op_def(op).traits.heavy; }

size_t saved_bytes(const Graph& g) {
  std::set<ValueId> saved;
  for (const Node& n : g.nodes())
    if (n.phase == Phase::Backward || n.phase == Phase::Update)
      for (ValueId v : n.inputs)
        if (is_fwd_value(g, v)) saved.insert(v);
  size_t b = 0;
  for (ValueId v : saved) b += g.value(v).bytes();
  return b;
}

// Puts the nodes added by a pass in place: before[k] run right before
// original node k, after[k] right after it (k < before.size()).
void place_added(Graph& g, const std::vector<std::vector<NodeId>>& before,
                 const std::vector<std::vector<NodeId>>& after) {
  std::vector<NodeId> order;
  order.reserve(g.num_nodes());
  for (size_t k = 0; k < before.size(); ++k) {
    for (NodeId c : before[k]) order.push_back(c);
    order.push_back(static_cast<NodeId>(k));
    if (k < after.size())
      for (NodeId c : after[k]) order.push_back(c);
  }
  g.reorder(order);
}

// The forward values that feed two or more forward nodes: a residual
// stream or a shortcut. Recomputing one would recompute the chain behind it
// (residual adds back to the first layer) at the start of backward, and
// every value of that chain would live from there to its own backward
// use: as much memory as keeping them, and the work twice.
std::set<ValueId> branching_values(const Graph& g) {
  std::vector<NodeId> first(g.num_values(), -1);
  std::set<ValueId> out;
  for (size_t k = 0; k < g.num_nodes(); ++k) {
    const Node& n = g.node(static_cast<NodeId>(k));
    if (n.phase != Phase::Forward) continue;
    for (ValueId u : n.inputs) {
      NodeId& f = first[static_cast<size_t>(u)];
      if (f >= 0 && f != static_cast<NodeId>(k) && is_fwd_value(g, u)) out.insert(u);
      if (f < 0) f = static_cast<NodeId>(k);
    }
  }
  return out;
}

}  // namespace

RecomputeStats apply_recompute(Graph& g, const std::function<bool(const Graph&, ValueId)>& keep) {
  RecomputeStats st;
  st.saved_bytes_before = saved_bytes(g);
  const size_t n0 = g.num_nodes();
  std::map<ValueId, ValueId> clone_of;                 // forward value -> its recomputed copy
  std::vector<std::vector<NodeId>> before(n0);         // clones to run before original node k
  size_t current = 0;                                  // the backward node being rewired

  // Returns the value backward should read in place of v.
  std::function<ValueId(ValueId)> get = [&](ValueId v) -> ValueId {
    if (!is_fwd_value(g, v) || keep(g, v)) return v;
    if (auto it = clone_of.find(v); it != clone_of.end()) return it->second;
    const NodeId pid = g.value(v).producer;
    const Node src = g.node(pid);  // copy: add_node may reallocate
    std::vector<ValueId> ins;
    for (ValueId u : src.inputs) ins.push_back(get(u));
    Attrs a = src.attrs;
    if (const std::string& off = op_def(src.op).traits.recompute_disables; !off.empty()) a.set(off, int64_t(0));
    std::vector<ValueId> outs = g.add_node(src.op, ins, a, src.layer, Phase::Backward, pid);
    for (size_t i = 0; i < outs.size(); ++i) {
      clone_of[src.outputs[i]] = outs[i];
      g.value(outs[i]).name = g.value(src.outputs[i]).name + ":recomputed";
    }
    before[current].push_back(static_cast<NodeId>(g.num_nodes() - 1));
    ++st.cloned_nodes;
    if (const auto& f = op_def(src.op).flops) st.extra_flops += f(g, g.node(static_cast<NodeId>(g.num_nodes() - 1)));
    return clone_of[v];
  };

  for (size_t k = 0; k < n0; ++k) {
    if (g.node(static_cast<NodeId>(k)).phase == Phase::Forward) continue;
    current = k;
    std::vector<ValueId> ins = g.node(static_cast<NodeId>(k)).inputs;
    for (ValueId& v : ins) v = get(v);
    g.node(static_cast<NodeId>(k)).inputs = ins;
  }
  if (st.cloned_nodes == 0) {
    st.saved_bytes_after = st.saved_bytes_before;
    return st;
  }
  place_added(g, before, {});
  st.saved_bytes_after = saved_bytes(g);
  return st;
}

RecomputeStats compress_saved(Graph& g, DType to, size_t min_bytes) {
  RecomputeStats st;
  st.saved_bytes_before = saved_bytes(g);
  const size_t n0 = g.num_nodes();
  std::vector<std::vector<NodeId>> before(n0), after(n0);
  std::map<ValueId, ValueId> packed;  // forward value -> its compressed copy
  for (size_t k = 0; k < n0; ++k) {
    const Node& reader = g.node(static_cast<NodeId>(k));
    if (reader.phase == Phase::Forward) continue;
    std::vector<ValueId> ins = reader.inputs;
    bool changed = false;
    for (ValueId& v : ins) {
      if (!is_fwd_value(g, v) || g.value(v).dtype != DType::f32 || g.value(v).bytes() < min_bytes) continue;
      auto it = packed.find(v);
      if (it == packed.end()) {
        const NodeId pid = g.value(v).producer;
        const std::string layer = g.node(pid).layer;
        const ValueId c = g.add1("cast", {v}, {{"dtype", int64_t(to)}}, layer, Phase::Forward, pid);
        g.value(c).name = g.value(v).name + ":saved";
        after[static_cast<size_t>(pid)].push_back(static_cast<NodeId>(g.num_nodes() - 1));
        it = packed.emplace(v, c).first;
        ++st.cloned_nodes;
      }
      const ValueId u = g.add1("cast", {it->second}, {{"dtype", int64_t(DType::f32)}}, g.node(static_cast<NodeId>(k)).layer,
                               Phase::Backward, g.value(v).producer);
      g.value(u).name = g.value(v).name + ":unpacked";
      before[k].push_back(static_cast<NodeId>(g.num_nodes() - 1));
      ++st.cloned_nodes;
      v = u;
      changed = true;
    }
    if (changed) g.node(static_cast<NodeId>(k)).inputs = ins;
  }
  if (packed.empty()) {
    st.saved_bytes_after = st.saved_bytes_before;
    return st;
  }
  place_added(g, before, after);
  st.saved_bytes_after = saved_bytes(g);
  return st;
}

bool valid_recompute_policy(const std::string& p) {
  return p == "none" || p == "auto" || p == "cheap" || p == "segments";
}

RecomputeStats apply_recompute_policy(Graph& g, const std::string& policy) {
  if (policy == "none") {
    RecomputeStats s;
    s.saved_bytes_before = s.saved_bytes_after = saved_bytes(g);
    return s;
  }
  // Forward values backward reads as they are.
  std::set<ValueId> read_back;
  for (const Node& n : g.nodes())
    if (n.phase != Phase::Forward)
      for (ValueId u : n.inputs)
        if (is_fwd_value(g, u)) read_back.insert(u);
  if (policy == "auto") {
    // Rebuilt only from values backward holds anyway (or parameters and
    // inputs): no chain, nothing kept longer for it.
    return apply_recompute(g, [&read_back](const Graph& gr, ValueId v) {
      const Node& p = gr.node(gr.value(v).producer);
      if (!op_def(p.op).traits.rebuild) return true;
      for (ValueId u : p.inputs)
        if (is_fwd_value(gr, u) && !read_back.count(u)) return true;
      return false;
    });
  }
  if (policy == "cheap") {
    auto kept = [](const Graph& gr, ValueId v) { return is_heavy(gr.node(gr.value(v).producer).op); };
    // A value is recomputed from kept inputs; an input kept only for it
    // (backward does not read it otherwise) costs its bytes. Recomputing
    // a dropout mask (1 byte an element) would keep the layer's output
    // before it (4): keep what is smaller (and on a tie, keep: no memory
    // saved, work added).
    // extra(v): the bytes kept only to recompute v (through the cheap
    // values in between).
    auto cost = std::make_shared<std::map<ValueId, size_t>>();
    std::function<size_t(const Graph&, ValueId)> extra = [&, cost](const Graph& gr, ValueId v) -> size_t {
      if (auto it = cost->find(v); it != cost->end()) return it->second;
      size_t e = 0;
      for (ValueId u : gr.node(gr.value(v).producer).inputs) {
        if (!is_fwd_value(gr, u) || read_back.count(u)) continue;
        e += kept(gr, u) ? gr.value(u).bytes() : extra(gr, u);
      }
      return (*cost)[v] = e;
    };
    return apply_recompute(g, [&](const Graph& gr, ValueId v) { return kept(gr, v) || extra(gr, v) >= gr.value(v).bytes(); });
  }
  if (policy == "segments") {
    // Heavy forward nodes in schedule order; keep the outputs of every k-th.
    std::vector<NodeId> heavy;
    for (size_t k = 0; k < g.num_nodes(); ++k)
      if (g.node(static_cast<NodeId>(k)).phase == Phase::Forward && is_heavy(g.node(static_cast<NodeId>(k)).op))
        heavy.push_back(static_cast<NodeId>(k));
    // Cut into about sqrt(n) segments of equal output bytes (early layers of
    // a CNN are the largest), keeping the output that ends each segment.
    double total = 0;
    for (NodeId h : heavy) total += static_cast<double>(g.value(g.node(h).outputs[0]).bytes());
    const double target = total / std::max(1.0, std::sqrt(static_cast<double>(heavy.size())));
    std::set<NodeId> kept;
    double acc = 0;
    for (size_t i = 0; i < heavy.size(); ++i) {
      acc += static_cast<double>(g.value(g.node(heavy[i]).outputs[0]).bytes());
      if (acc >= target || i + 1 == heavy.size()) {
        kept.insert(heavy[i]);
        acc = 0;
      }
    }
    // Values that branch stay too (branching_values): cheap ones would
    // otherwise bring back the whole residual stream at the start of
    // backward. (Under "cheap" the chains are short and keeping them
    // costs more than it saves: a ResNet-18's block outputs.)
    const std::set<ValueId> branch = branching_values(g);
    return apply_recompute(g, [kept, branch](const Graph& gr, ValueId v) {
      return kept.count(gr.value(v).producer) != 0 || branch.count(v) != 0;
    });
  }
  throw GraphError("unknown recompute policy '" + policy + "' (expected none, auto, cheap or segments)");
}

}  // namespace memfit
