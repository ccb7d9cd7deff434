// Liveness + placement. Walks the schedule once to find each value's first and
// last use, merges views and in-place outputs into their input's buffer, then
// places the buffers in one transient arena: greedily, each at the
// best-fitting gap among the buffers whose lifetimes overlap it, under a few
// orders (by size, by size x lifetime, by lifetime), keeping the smallest
// arena.
#include <algorithm>
#include <numeric>

#include "memfit/op_registry.hpp"
#include "memfit/plan.hpp"

namespace memfit {

const char* arena_name(Arena a) {
  switch (a) {
    case Arena::Transient: return "transient";
    case Arena::Params: return "params";
    case Arena::Grads: return "grads";
    case Arena::OptState: return "optstate";
    case Arena::Inputs: return "inputs";
    case Arena::Tier: return "tier";
    case Arena::Count: break;
  }
  return "?";
}

size_t Plan::total_bytes() const {
  size_t t = 0;
  for (size_t a = 0; a < kNumArenas; ++a)
    if (in_memory(static_cast<Arena>(a))) t += arena_bytes[a];
  return t + library_heap_bytes;
}

namespace {

size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

Arena arena_of(VClass c) {
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

struct Block {
  int32_t first, last;
  size_t bytes;
  size_t offset = 0;
  ValueId root = kNone;  // kNone for scratch
  NodeId node = -1;      // scratch owner
};

// Places blocks in the given order, each at the best-fitting gap (the
// smallest that holds it) among the already placed blocks whose lifetimes
// overlap it, else on top of them. Returns the arena size.
size_t place_in_order(std::vector<Block>& blocks, const std::vector<size_t>& order, size_t align, size_t guard) {
  std::vector<size_t> placed;
  placed.reserve(order.size());
  size_t arena = 0;
  std::vector<std::pair<size_t, size_t>> busy;  // [begin, end) in bytes
  for (size_t bi : order) {
    Block& b = blocks[bi];
    const size_t need = align_up(b.bytes + guard, align);
    busy.clear();
    for (size_t pi : placed) {
      const Block& p = blocks[pi];
      if (p.first <= b.last && b.first <= p.last)
        busy.push_back({p.offset, p.offset + align_up(p.bytes + guard, align)});
    }
    std::sort(busy.begin(), busy.end());
    size_t best = SIZE_MAX, best_gap = SIZE_MAX, cursor = 0;
    for (auto& [s, e] : busy) {
      if (s > cursor && s - cursor >= need && s - cursor < best_gap) {
        best = cursor;
        best_gap = s - cursor;
      }
      cursor = std::max(cursor, e);
    }
    if (best == SIZE_MAX) best = cursor;
    b.offset = best;
    arena = std::max(arena, best + need);
    placed.push_back(bi);
  }
  return arena;
}

// Greedy placement under a few orders (each good on some graphs), keeping
// the smallest arena:
//  - by size, largest first;
//  - by size x lifetime, largest first;
//  - by lifetime, longest first (ties: largest first).
size_t place_blocks(std::vector<Block>& blocks, size_t align, size_t guard) {
  const size_t n = blocks.size();
  std::vector<std::vector<size_t>> orders;
  std::vector<size_t> base(n);
  std::iota(base.begin(), base.end(), 0);
  auto by = [&](auto key) {
    std::vector<size_t> o = base;
    std::stable_sort(o.begin(), o.end(), [&](size_t a, size_t b) {
      const auto ka = key(blocks[a]), kb = key(blocks[b]);
      if (ka != kb) return ka > kb;
      return blocks[a].first < blocks[b].first;
    });
    return o;
  };
  orders.push_back(by([](const Block& b) { return b.bytes; }));
  orders.push_back(by([](const Block& b) { return static_cast<double>(b.bytes) * (b.last - b.first + 1); }));
  orders.push_back(by([](const Block& b) { return std::pair<int32_t, size_t>(b.last - b.first, b.bytes); }));
  size_t best = SIZE_MAX;
  std::vector<size_t> best_offsets;
  for (const auto& o : orders) {
    const size_t a = place_in_order(blocks, o, align, guard);
    if (a < best) {
      best = a;
      best_offsets.clear();
      for (const Block& b : blocks) best_offsets.push_back(b.offset);
    }
  }
  for (size_t i = 0; i < n; ++i) blocks[i].offset = best_offsets[i];
  return n ? best : 0;
}

}  // namespace

Plan make_plan(const Graph& g, const std::vector<size_t>& value_bytes, const std::vector<size_t>& node_scratch,
               const PlanOptions& opt) {
  const size_t nv = g.num_values(), nn = g.num_nodes();
  const int32_t end = static_cast<int32_t>(nn);
  Plan p;
  p.options = opt;
  p.values.resize(nv);
  p.scratch.resize(nn);

  // Definitions and last uses.
  for (size_t v = 0; v < nv; ++v) {
    Placement& pl = p.values[v];
    const Value& val = g.value(static_cast<ValueId>(v));
    pl.arena = val.tiered ? Arena::Tier : arena_of(val.cls);
    pl.bytes = value_bytes.at(v);
    pl.root = static_cast<ValueId>(v);
    pl.first = val.producer;
    pl.last = val.is_output || is_persistent(val.cls) ? end : val.producer;
  }
  for (size_t k = 0; k < nn; ++k)
    for (ValueId v : g.node(static_cast<NodeId>(k)).inputs)
      p.values[static_cast<size_t>(v)].last = std::max(p.values[static_cast<size_t>(v)].last, static_cast<int32_t>(k));

  // Alias sets: views always share their input's buffer; in-place outputs
  // take over an input whose whole alias set dies at this node.
  auto root_of = [&](ValueId v) {
    while (p.values[static_cast<size_t>(v)].root != v) v = p.values[static_cast<size_t>(v)].root;
    return v;
  };
  std::vector<int32_t> set_last(nv);
  for (size_t v = 0; v < nv; ++v) set_last[v] = p.values[v].last;
  for (size_t k = 0; k < nn; ++k) {
    const Node& n = g.node(static_cast<NodeId>(k));
    const OpTraits& tr = op_def(n.op).traits;
    if (n.outputs.empty()) continue;
    ValueId out = n.outputs[0];
    Placement& po = p.values[static_cast<size_t>(out)];
    if (tr.view_of_input >= 0) {
      ValueId r = root_of(n.inputs[static_cast<size_t>(tr.view_of_input)]);
      po.root = r;
      po.arena = p.values[static_cast<size_t>(r)].arena;
      set_last[static_cast<size_t>(r)] = std::max(set_last[static_cast<size_t>(r)], set_last[static_cast<size_t>(out)]);
      continue;
    }
    if (opt.no_plan || !opt.in_place || tr.inplace_input < 0 || po.arena != Arena::Transient ||
        static_cast<size_t>(tr.inplace_input) >= n.inputs.size())
      continue;
    ValueId r = root_of(n.inputs[static_cast<size_t>(tr.inplace_input)]);
    const Placement& pr = p.values[static_cast<size_t>(r)];
    const Value& rv = g.value(r);
    // Same element type only: a kernel writing narrower elements over wider
    // ones it has not read yet (another thread's rows) would corrupt them.
    if (pr.arena != Arena::Transient || rv.is_output || set_last[static_cast<size_t>(r)] != static_cast<int32_t>(k) ||
        pr.bytes < po.bytes || rv.dtype != g.value(out).dtype)
      continue;
    po.root = r;
    set_last[static_cast<size_t>(r)] = set_last[static_cast<size_t>(out)];
  }
  for (size_t v = 0; v < nv; ++v) {
    ValueId r = root_of(static_cast<ValueId>(v));
    p.values[v].root = r;
  }

  // Transient blocks: one per alias root, one per node scratch.
  std::vector<Block> blocks;
  std::vector<int32_t> block_of(nv, -1);
  for (size_t v = 0; v < nv; ++v) {
    const Placement& pl = p.values[v];
    if (pl.arena != Arena::Transient || pl.root != static_cast<ValueId>(v) || pl.bytes == 0) continue;
    int32_t first = std::max<int32_t>(pl.first, 0);
    block_of[v] = static_cast<int32_t>(blocks.size());
    blocks.push_back({first, set_last[v], pl.bytes, 0, static_cast<ValueId>(v), -1});
  }
  for (size_t k = 0; k < nn; ++k) {
    size_t s = node_scratch.at(k);
    if (s == 0) continue;
    blocks.push_back({static_cast<int32_t>(k), static_cast<int32_t>(k), s, 0, kNone, static_cast<NodeId>(k)});
  }
  for (const Block& b : blocks) p.naive_transient_bytes += align_up(b.bytes, opt.alignment);
  {
    std::vector<size_t> live(nn + 1, 0);
    for (const Block& b : blocks)
      for (int32_t t = b.first; t <= std::min(b.last, end); ++t) live[static_cast<size_t>(t)] += b.bytes;
    p.peak_live_bytes = *std::max_element(live.begin(), live.end());
  }
  size_t tsize = 0;
  if (opt.no_plan) {
    for (Block& b : blocks) {
      b.offset = tsize;
      tsize += align_up(b.bytes + opt.guard_bytes, opt.alignment);
    }
  } else {
    tsize = place_blocks(blocks, opt.alignment, opt.guard_bytes);
  }
  p.arena_bytes[static_cast<size_t>(Arena::Transient)] = tsize;
  for (const Block& b : blocks) {
    if (b.root != kNone) p.values[static_cast<size_t>(b.root)].offset = b.offset;
    else p.scratch[static_cast<size_t>(b.node)] = {b.offset, b.bytes};
  }

  // Persistent arenas: flat and sequential. Parameters and buffers in
  // creation order; gradients in the order of the parameters they belong
  // to (autodiff makes them in reverse), so the two arenas mirror each
  // other; optimizer state as the optimizer made it (per state, in
  // parameter order).
  std::vector<size_t> persistent;
  for (size_t v = 0; v < nv; ++v)
    if (p.values[v].arena != Arena::Transient && p.values[v].root == static_cast<ValueId>(v)) persistent.push_back(v);
  auto key = [&](size_t v) {
    const ValueId of = g.value(static_cast<ValueId>(v)).grad_of;
    return p.values[v].arena == Arena::Grads && of != kNone ? static_cast<size_t>(of) : v;
  };
  std::stable_sort(persistent.begin(), persistent.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  for (size_t v : persistent) {
    Placement& pl = p.values[v];
    size_t& sz = p.arena_bytes[static_cast<size_t>(pl.arena)];
    pl.offset = sz;
    sz += align_up(pl.bytes, opt.alignment);
  }
  // Aliases take their root's offset; lifetimes of the set.
  for (size_t v = 0; v < nv; ++v) {
    Placement& pl = p.values[v];
    if (pl.root != static_cast<ValueId>(v)) {
      pl.offset = p.values[static_cast<size_t>(pl.root)].offset;
      pl.arena = p.values[static_cast<size_t>(pl.root)].arena;
    }
  }
  for (size_t v = 0; v < nv; ++v)
    if (p.values[v].root == static_cast<ValueId>(v)) p.values[v].last = set_last[v];
  // The tier's traffic per step: what its loads read and its stores write.
  for (size_t k = 0; k < nn; ++k) {
    const Node& n = g.node(static_cast<NodeId>(k));
    const OpTraits::TierIo io = op_def(n.op).traits.tier_io;
    if (io == OpTraits::TierIo::Load) p.tier_read_bytes += value_bytes.at(static_cast<size_t>(n.outputs.at(0)));
    if (io == OpTraits::TierIo::Store) p.tier_written_bytes += value_bytes.at(static_cast<size_t>(n.inputs.at(0)));
  }
  return p;
}

}  // namespace memfit
