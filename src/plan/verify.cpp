// Independent plan checker: recomputes lifetimes from the graph and checks
// the placement without trusting anything the planner derived.
#include <algorithm>
#include <sstream>

#include "memfit/op_registry.hpp"
#include "memfit/plan.hpp"

namespace memfit {

std::string verify_plan(const Graph& g, const Plan& p) {
  const size_t nv = g.num_values(), nn = g.num_nodes();
  if (p.values.size() != nv || p.scratch.size() != nn) return "plan does not match the graph";
  const int32_t end = static_cast<int32_t>(nn);
  // Lifetime of each value from the graph alone.
  std::vector<int32_t> first(nv), last(nv);
  for (size_t v = 0; v < nv; ++v) {
    const Value& val = g.value(static_cast<ValueId>(v));
    first[v] = std::max<int32_t>(val.producer, 0);
    last[v] = val.is_output || is_persistent(val.cls) ? end : std::max<int32_t>(val.producer, 0);
  }
  for (size_t k = 0; k < nn; ++k)
    for (ValueId v : g.node(static_cast<NodeId>(k)).inputs)
      last[static_cast<size_t>(v)] = std::max(last[static_cast<size_t>(v)], static_cast<int32_t>(k));

  struct Iv {
    size_t b, e;
    int32_t t0, t1;
    std::string what;
    size_t root;
  };
  std::vector<Iv> iv;
  for (size_t v = 0; v < nv; ++v) {
    const Placement& pl = p.values[v];
    const Value& val = g.value(static_cast<ValueId>(v));
    if (pl.bytes == 0) continue;
    if (pl.offset % p.options.alignment) return "value '" + val.name + "' is not aligned";
    if (pl.offset + pl.bytes > p.arena_bytes[static_cast<size_t>(pl.arena)])
      return "value '" + val.name + "' lies outside its arena";
    if (is_persistent(val.cls) && pl.root != static_cast<ValueId>(v)) {
      // A persistent value may only be a view of another persistent value.
      const Node* prod = val.producer >= 0 ? &g.node(val.producer) : nullptr;
      if (!prod || op_def(prod->op).traits.view_of_input < 0)
        return "persistent value '" + val.name + "' shares another buffer";
    }
    if (pl.arena != Arena::Transient) continue;
    // A value sharing a buffer must be a view or an in-place output of a value
    // in the same set; the set's bytes are checked as one interval below.
    iv.push_back({pl.offset, pl.offset + pl.bytes + p.options.guard_bytes, first[v], last[v], val.name,
                  static_cast<size_t>(pl.root)});
  }
  for (size_t k = 0; k < nn; ++k) {
    const ScratchPlacement& s = p.scratch[k];
    if (s.bytes == 0) continue;
    if (s.offset % p.options.alignment) return "scratch of node " + std::to_string(k) + " is not aligned";
    if (s.offset + s.bytes > p.arena_bytes[0]) return "scratch of node " + std::to_string(k) + " lies outside the arena";
    iv.push_back({s.offset, s.offset + s.bytes + p.options.guard_bytes, static_cast<int32_t>(k), static_cast<int32_t>(k),
                  "scratch of " + describe(g, g.node(static_cast<NodeId>(k))), SIZE_MAX - k});
  }
  // Pinned persistent buffers never overlap each other.
  for (size_t a = 0; a < nv; ++a) {
    const Placement& pa = p.values[a];
    if (pa.arena == Arena::Transient || pa.root != static_cast<ValueId>(a) || pa.bytes == 0) continue;
    for (size_t b = a + 1; b < nv; ++b) {
      const Placement& pb = p.values[b];
      if (pb.arena != pa.arena || pb.root != static_cast<ValueId>(b) || pb.bytes == 0) continue;
      if (pa.offset < pb.offset + pb.bytes && pb.offset < pa.offset + pa.bytes)
        return "persistent values '" + g.value(static_cast<ValueId>(a)).name + "' and '" +
               g.value(static_cast<ValueId>(b)).name + "' overlap";
    }
  }
  // Transient: two buffers of different sets whose lifetimes overlap must not
  // share bytes. Within one set, a later member may only be defined at or
  // after the last use of the earlier members it overwrites (in place), which
  // is what "lifetimes touch at one node" means.
  std::sort(iv.begin(), iv.end(), [](const Iv& x, const Iv& y) { return x.b < y.b; });
  for (size_t i = 0; i < iv.size(); ++i) {
    for (size_t j = i + 1; j < iv.size() && iv[j].b < iv[i].e; ++j) {
      const Iv& x = iv[i];
      const Iv& y = iv[j];
      bool time = x.t0 <= y.t1 && y.t0 <= x.t1;
      if (!time) continue;
      if (x.root == y.root) {
        if (x.t1 == y.t0 || y.t1 == x.t0 || x.t0 == y.t0) continue;  // in-place hand-over or view
        if ((x.t0 <= y.t0 && y.t1 <= x.t1) || (y.t0 <= x.t0 && x.t1 <= y.t1)) continue;  // view within its base
      }
      std::ostringstream o;
      o << "'" << x.what << "' [" << x.b << ", " << x.e << ") live " << x.t0 << ".." << x.t1 << " overlaps '" << y.what
        << "' [" << y.b << ", " << y.e << ") live " << y.t0 << ".." << y.t1;
      return o.str();
    }
  }
  return {};
}

}  // namespace memfit
