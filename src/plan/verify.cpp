// Independent plan checker. It trusts nothing the planner derived (alias
// roots, lifetimes, set extents): from the graph and the op traits alone it
// works out which bytes every value needs and when, then replays the
// schedule and checks that at every node each live value's bytes belong to
// it alone. Two live values may share bytes only when a trait says so:
//  - a view (view_of_input) is its input's bytes, at the same offset;
//  - an in-place output (inplace_input) may take over its input's bytes at
//    the one node where that input is read for the last time.
#include <algorithm>
#include <sstream>

#include "memfit/op_registry.hpp"
#include "memfit/plan.hpp"

namespace memfit {
namespace {

Arena expected_arena(VClass c) {
  switch (c) {
    case VClass::Transient: return Arena::Transient;
    case VClass::Input: return Arena::Inputs;
    case VClass::Param:
    case VClass::Buffer: return Arena::Params;
    case VClass::ParamGrad: return Arena::Grads;
    case VClass::OptState: return Arena::OptState;
  }
  return Arena::Transient;
}

// A region of the transient arena owned by one content (a value and its
// views) or by one node's scratch, with the nodes during which it is live.
struct Region {
  size_t begin, end;  // bytes, guard included
  int32_t t0, t1;     // nodes, inclusive
  ValueId content;    // kNone for scratch
  std::string what;
};

}  // namespace

std::string verify_plan(const Graph& g, const Plan& p, const std::vector<size_t>& value_bytes,
                        const std::vector<size_t>& node_scratch) {
  const size_t nv = g.num_values(), nn = g.num_nodes();
  if (p.values.size() != nv || p.scratch.size() != nn) return "plan does not match the graph";
  if (!value_bytes.empty() && value_bytes.size() != nv) return "value sizes do not match the graph";
  if (!node_scratch.empty() && node_scratch.size() != nn) return "scratch sizes do not match the graph";
  const size_t align = p.options.alignment ? p.options.alignment : 1;
  const size_t guard = p.options.guard_bytes;
  const int32_t end = static_cast<int32_t>(nn);
  auto name = [&](size_t v) { return "'" + g.value(static_cast<ValueId>(v)).name + "'"; };

  // A tiered value has no bytes in memory: only the nodes that move it
  // between the tier and memory may name it.
  for (size_t k = 0; k < nn; ++k) {
    const Node& n = g.node(static_cast<NodeId>(k));
    const OpTraits::TierIo io = op_def(n.op).traits.tier_io;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const Value& val = g.value(n.inputs[i]);
      if (!val.tiered) continue;
      const bool ok = (io == OpTraits::TierIo::Load && i == 0) || (io == OpTraits::TierIo::Store && i == 1);
      if (!ok) return "tiered value " + name(static_cast<size_t>(n.inputs[i])) + " is read by " + n.op + " in '" +
                      n.layer + "', which does not move it between the tier and memory";
      if (!is_persistent(val.cls)) return "tiered value " + name(static_cast<size_t>(n.inputs[i])) + " is not persistent";
    }
    for (ValueId o : n.outputs)
      if (g.value(o).tiered) return "tiered value " + name(static_cast<size_t>(o)) + " is made by " + n.op;
  }

  // Content of each value: itself, or for a view the content of its input.
  std::vector<ValueId> content(nv);
  for (size_t v = 0; v < nv; ++v) content[v] = static_cast<ValueId>(v);
  for (size_t k = 0; k < nn; ++k) {
    const Node& n = g.node(static_cast<NodeId>(k));
    const int vi = op_def(n.op).traits.view_of_input;
    if (vi < 0 || n.outputs.empty()) continue;
    const ValueId out = n.outputs[0];
    content[static_cast<size_t>(out)] = content[static_cast<size_t>(n.inputs.at(static_cast<size_t>(vi)))];
  }

  // Sizes, arenas, offsets and alignment of every value.
  for (size_t v = 0; v < nv; ++v) {
    const Placement& pl = p.values[v];
    const Value& val = g.value(static_cast<ValueId>(v));
    if (!value_bytes.empty() && pl.bytes != value_bytes[v])
      return "value " + name(v) + " is planned with " + std::to_string(pl.bytes) + " bytes but needs " +
             std::to_string(value_bytes[v]);
    if (pl.bytes == 0) continue;
    const size_t c = static_cast<size_t>(content[v]);
    if (c != v) {
      const Placement& base = p.values[c];
      if (pl.arena != base.arena || pl.offset != base.offset)
        return "view " + name(v) + " is not placed on the bytes of " + name(c);
      if (pl.bytes > base.bytes) return "view " + name(v) + " is larger than " + name(c);
      if (is_persistent(val.cls) && base.arena == Arena::Transient)
        return "pinned value " + name(v) + " is a view of the transient " + name(c);
      continue;
    }
    if (pl.arena != (val.tiered ? Arena::Tier : expected_arena(val.cls)))
      return "value " + name(v) + " (" + vclass_name(val.cls) + ") is in the " + arena_name(pl.arena) + " arena";
    if (pl.offset % align) return "value " + name(v) + " is not aligned";
    const size_t extent = pl.offset + pl.bytes + (pl.arena == Arena::Transient ? guard : 0);
    if (extent > p.arena_bytes[static_cast<size_t>(pl.arena)])
      return "value " + name(v) + " lies outside the " + arena_name(pl.arena) + " arena";
  }

  // Persistent arenas hold pinned buffers, live for the whole run: no two
  // may share a byte.
  for (size_t a = 0; a < kNumArenas; ++a) {
    if (static_cast<Arena>(a) == Arena::Transient) continue;
    std::vector<size_t> own;
    for (size_t v = 0; v < nv; ++v)
      if (p.values[v].arena == static_cast<Arena>(a) && p.values[v].bytes && content[v] == static_cast<ValueId>(v))
        own.push_back(v);
    std::sort(own.begin(), own.end(), [&](size_t x, size_t y) { return p.values[x].offset < p.values[y].offset; });
    for (size_t i = 1; i < own.size(); ++i) {
      const Placement& x = p.values[own[i - 1]];
      if (x.offset + x.bytes > p.values[own[i]].offset)
        return "pinned values " + name(own[i - 1]) + " and " + name(own[i]) + " overlap in the " +
               arena_name(static_cast<Arena>(a)) + " arena";
    }
  }

  // Lifetimes of transient contents, from the graph: from the producing
  // node to the last node reading the content through any of its views;
  // outputs stay live after the step.
  std::vector<int32_t> def(nv, -1), last(nv, -1);
  for (size_t v = 0; v < nv; ++v) {
    const Value& val = g.value(static_cast<ValueId>(v));
    const size_t c = static_cast<size_t>(content[v]);
    if (c == v) def[v] = std::max<int32_t>(val.producer, 0);
    const int32_t own_last = val.is_output ? end : std::max<int32_t>(val.producer, 0);
    last[c] = std::max(last[c], own_last);
  }
  for (size_t k = 0; k < nn; ++k)
    for (ValueId v : g.node(static_cast<NodeId>(k)).inputs) {
      const size_t c = static_cast<size_t>(content[static_cast<size_t>(v)]);
      last[c] = std::max(last[c], static_cast<int32_t>(k));
    }

  std::vector<Region> regions;
  for (size_t v = 0; v < nv; ++v) {
    const Placement& pl = p.values[v];
    if (content[v] != static_cast<ValueId>(v) || pl.arena != Arena::Transient || pl.bytes == 0) continue;
    regions.push_back({pl.offset, pl.offset + pl.bytes + guard, def[v], last[v], static_cast<ValueId>(v), name(v)});
  }
  for (size_t k = 0; k < nn; ++k) {
    const ScratchPlacement& s = p.scratch[k];
    if (!node_scratch.empty() && s.bytes < node_scratch[k])
      return "scratch of node " + std::to_string(k) + " (" + describe(g, g.node(static_cast<NodeId>(k))) + ") has " +
             std::to_string(s.bytes) + " bytes but needs " + std::to_string(node_scratch[k]);
    if (s.bytes == 0) continue;
    if (s.offset % align) return "scratch of node " + std::to_string(k) + " is not aligned";
    if (s.offset + s.bytes + guard > p.arena_bytes[static_cast<size_t>(Arena::Transient)])
      return "scratch of node " + std::to_string(k) + " lies outside the transient arena";
    const int32_t t = static_cast<int32_t>(k);
    regions.push_back({s.offset, s.offset + s.bytes + guard, t, t, kNone,
                       "scratch of " + describe(g, g.node(static_cast<NodeId>(k)))});
  }

  // The one legal sharing between live contents: node k declares that
  // output 0 may take over input i, the input's content is read for the last
  // time at k, and the output starts at the same byte.
  auto handover = [&](const Region& in, const Region& out) {
    if (in.content == kNone || out.content == kNone || in.t1 != out.t0) return false;
    const Node& n = g.node(static_cast<NodeId>(out.t0));
    const int ii = op_def(n.op).traits.inplace_input;
    if (ii < 0 || static_cast<size_t>(ii) >= n.inputs.size() || n.outputs.empty() || content[static_cast<size_t>(n.outputs[0])] != out.content) return false;
    if (content[static_cast<size_t>(n.inputs.at(static_cast<size_t>(ii)))] != in.content) return false;
    return in.begin == out.begin;
  };

  // Replay: every pair of regions that share bytes must never be live at
  // the same node, unless it is a declared hand-over.
  std::sort(regions.begin(), regions.end(), [](const Region& x, const Region& y) { return x.begin < y.begin; });
  for (size_t i = 0; i < regions.size(); ++i) {
    for (size_t j = i + 1; j < regions.size() && regions[j].begin < regions[i].end; ++j) {
      const Region& x = regions[i];
      const Region& y = regions[j];
      if (x.t1 < y.t0 || y.t1 < x.t0) continue;  // never live together
      if (handover(x, y) || handover(y, x)) continue;
      std::ostringstream o;
      o << x.what << " [" << x.begin << ", " << x.end << ") live at nodes " << x.t0 << ".." << x.t1 << " and "
        << y.what << " [" << y.begin << ", " << y.end << ") live at nodes " << y.t0 << ".." << y.t1
        << " share bytes";
      return o.str();
    }
  }
  return {};
}

std::string verify_plan(const Graph& g, const Plan& p) { return verify_plan(g, p, {}, {}); }

}  // namespace memfit
