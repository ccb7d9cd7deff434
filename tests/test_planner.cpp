// The planner and its independent checker, property-tested.
//
// Random training graphs (chains with fan-out and residual adds, views,
// in-place ops, convolutions and pools with their workspaces, batch norm,
// dropout masks; then autodiff and an optimizer update) get random kernel
// scratch sizes and random plan options. For every one:
//  - verify_plan accepts the plan;
//  - the transient arena is at least the peak of live bytes (a lower bound
//    for any placement) and, over all graphs, close to it;
//  - an oracle written here (a plain per-node replay, pairwise, of which
//    bytes every live buffer owns) agrees with verify_plan on randomly
//    perturbed plans, and targeted corruptions (two live buffers moved onto
//    each other, a scratch moved onto a live value, a misaligned offset, a
//    shrunk arena, a shrunk buffer, a view moved off its base, two pinned
//    buffers overlapping) are rejected.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "memfit/autodiff.hpp"
#include "memfit/builder.hpp"
#include "memfit/op_registry.hpp"
#include "memfit/optim.hpp"
#include "memfit/plan.hpp"
#include "models/zoo.hpp"
#include "compile/step_graph.hpp"

using namespace memfit;

namespace {

std::vector<size_t> bytes_of(const Graph& g) {
  std::vector<size_t> r(g.num_values());
  for (size_t v = 0; v < r.size(); ++v) r[v] = g.value(static_cast<ValueId>(v)).bytes();
  return r;
}

// A random training step. Features stay small so that arenas are a few
// hundred KiB and the oracle is cheap.
struct RandomStep {
  Graph g;
  std::vector<size_t> scratch;
};

std::unique_ptr<RandomStep> random_step(std::mt19937_64& rng) {
  auto rs = std::make_unique<RandomStep>();
  Graph& g = rs->g;
  Builder b(g, true);
  auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  const int64_t B = 1 + pick(4);
  ValueId x = g.input("x", {B, 16});
  ValueId labels = g.input("labels", {B}, DType::i32);
  std::vector<ValueId> pool{x};
  ValueId cur = x;
  // Values of the pool with the same shape as v (for adds).
  auto same_shape = [&](ValueId v) {
    std::vector<ValueId> r;
    for (ValueId u : pool)
      if (u != v && g.value(u).shape == g.value(v).shape) r.push_back(u);
    return r;
  };
  const int layers = 4 + static_cast<int>(pick(14));
  for (int l = 0; l < layers; ++l) {
    // Mostly continue the chain; sometimes branch from an earlier value
    // (fan-out: that value then lives on).
    if (pick(4) == 0) cur = pool[static_cast<size_t>(pick(static_cast<int64_t>(pool.size())))];
    std::string nm = std::to_string(l);
    nm.insert(0, 1, 'l');  // (not "l" + ...: GCC 12 warns falsely of an overlapping memcpy there)
    const Shape s = g.value(cur).shape;
    const int64_t f = s.size() == 2 ? s[1] : numel(s) / s[0];
    switch (pick(10)) {
      case 0:
        cur = linear(b, s.size() == 2 ? cur : flatten(b, cur), 4 * (1 + pick(12)), {.bias = pick(2) == 0, .name = nm});
        break;
      case 1: cur = relu(b, cur); break;
      case 2: cur = dropout(b, cur, 0.25, nm); break;
      case 3: {
        auto peers = same_shape(cur);
        if (!peers.empty()) cur = add(b, cur, peers[static_cast<size_t>(pick(static_cast<int64_t>(peers.size())))]);
        else cur = add(b, cur, cur);  // the same value twice
        break;
      }
      case 4:  // view chain: [B, f] -> [B, f/2, 2] -> [B, f]
        if (s.size() == 2 && f % 2 == 0) cur = reshape(b, reshape(b, cur, {B, f / 2, 2}), {B, f});
        break;
      case 5:
        cur = g.add1("scale", {cur}, {{"alpha", 0.5}}, b.auto_name("scale"));
        break;
      case 6:
        if (s.size() == 2) {
          auto peers = same_shape(cur);
          ValueId other = peers.empty() ? cur : peers[0];
          cur = concat(b, {cur, other}, 1);
        }
        break;
      case 7:  // a small conv stage: [B, 16] -> [B, 1, 4, 4] -> conv -> pool -> [B, 4k]
        if (s.size() == 2 && f == 16) {
          ValueId img = reshape(b, cur, {B, 1, 4, 4});
          img = conv2d(b, img, 1 + pick(4), 3, {.pad = 1, .name = nm});
          img = relu(b, img);
          img = max_pool2d(b, img, 2);
          cur = flatten(b, img);
        } else {
          cur = linear(b, s.size() == 2 ? cur : flatten(b, cur), 16, {.name = nm});
        }
        break;
      case 8:
        if (s.size() == 2) cur = batch_norm(b, cur, {.name = nm});
        break;
      default:
        cur = linear(b, s.size() == 2 ? cur : flatten(b, cur), 16, {.name = nm});
        break;
    }
    pool.push_back(cur);
  }
  if (g.value(cur).shape.size() != 2) cur = flatten(b, cur);
  // Sometimes add a branch that joins late (a long-lived value).
  if (pick(2) == 0 && g.value(cur).shape == g.value(pool[1 % pool.size()]).shape)
    cur = add(b, cur, pool[1 % pool.size()]);
  ValueId logits = linear(b, cur, 5, {.name = "head"});
  g.value(logits).is_output = true;
  ValueId loss = softmax_xent(b, logits, labels);
  build_backward(g, loss);
  OptimizerConfig oc;
  oc.kind = pick(2) ? "sgd" : "adam";
  oc.momentum = 0.9;
  append_optimizer(g, oc);
  rs->scratch.assign(g.num_nodes(), 0);
  for (size_t& s : rs->scratch)
    if (pick(3) == 0) s = 1 + static_cast<size_t>(pick(5000));
  return rs;
}

PlanOptions random_options(std::mt19937_64& rng) {
  PlanOptions o;
  const size_t aligns[] = {16, 64, 256};
  o.alignment = aligns[rng() % 3];
  const size_t guards[] = {0, 0, 0, 64, 100};
  o.guard_bytes = guards[rng() % 5];
  o.in_place = rng() % 4 != 0;
  o.no_plan = rng() % 8 == 0;
  return o;
}

// ---- The oracle: a plain per-node replay, written without the verifier's
// sweep. For every node t it lists the live transient buffers (a content and
// its views count once; scratch of node t) and checks every pair.

struct Oracle {
  const Graph& g;
  std::vector<ValueId> content;
  std::vector<int32_t> def, last;

  explicit Oracle(const Graph& graph) : g(graph) {
    const size_t nv = g.num_values(), nn = g.num_nodes();
    content.resize(nv);
    for (size_t v = 0; v < nv; ++v) content[v] = static_cast<ValueId>(v);
    for (const Node& n : g.nodes())
      if (op_def(n.op).traits.view_of_input >= 0)
        content[static_cast<size_t>(n.outputs[0])] =
            content[static_cast<size_t>(n.inputs[static_cast<size_t>(op_def(n.op).traits.view_of_input)])];
    def.assign(nv, 0);
    last.assign(nv, -1);
    for (size_t v = 0; v < nv; ++v) {
      const Value& val = g.value(static_cast<ValueId>(v));
      const size_t c = static_cast<size_t>(content[v]);
      if (c == v) def[v] = std::max<int32_t>(val.producer, 0);
      last[c] = std::max(last[c], val.is_output ? static_cast<int32_t>(nn) : std::max<int32_t>(val.producer, 0));
    }
    for (size_t k = 0; k < nn; ++k)
      for (ValueId v : g.node(static_cast<NodeId>(k)).inputs) {
        const size_t c = static_cast<size_t>(content[static_cast<size_t>(v)]);
        last[c] = std::max(last[c], static_cast<int32_t>(k));
      }
  }

  // true when the plan is sound.
  bool sound(const Plan& p, const std::vector<size_t>& vbytes, const std::vector<size_t>& scratch) const {
    const size_t nv = g.num_values(), nn = g.num_nodes();
    const size_t al = p.options.alignment, gb = p.options.guard_bytes;
    const size_t T = static_cast<size_t>(Arena::Transient);
    for (size_t v = 0; v < nv; ++v) {
      const Placement& pl = p.values[v];
      if (pl.bytes != vbytes[v]) return false;
      if (!pl.bytes) continue;
      const size_t c = static_cast<size_t>(content[v]);
      if (c != v) {
        if (pl.offset != p.values[c].offset || pl.arena != p.values[c].arena) return false;
        continue;
      }
      if (pl.offset % al) return false;
      if (pl.offset + pl.bytes + (pl.arena == Arena::Transient ? gb : 0) > p.arena_bytes[static_cast<size_t>(pl.arena)])
        return false;
    }
    for (size_t k = 0; k < nn; ++k) {
      if (p.scratch[k].bytes < scratch[k]) return false;
      if (p.scratch[k].bytes &&
          (p.scratch[k].offset % al || p.scratch[k].offset + p.scratch[k].bytes + gb > p.arena_bytes[T]))
        return false;
    }
    // Pinned: all persistent owners pairwise disjoint within an arena.
    for (size_t a = 0; a < nv; ++a)
      for (size_t b = a + 1; b < nv; ++b) {
        const Placement &x = p.values[a], &y = p.values[b];
        if (x.arena == Arena::Transient || x.arena != y.arena || !x.bytes || !y.bytes) continue;
        if (content[a] != static_cast<ValueId>(a) || content[b] != static_cast<ValueId>(b)) continue;
        if (x.offset < y.offset + y.bytes && y.offset < x.offset + x.bytes) return false;
      }
    struct Buf {
      size_t b, e;
      ValueId c;  // kNone: scratch
    };
    for (size_t t = 0; t <= nn; ++t) {
      std::vector<Buf> live;
      for (size_t v = 0; v < nv; ++v) {
        const Placement& pl = p.values[v];
        if (content[v] != static_cast<ValueId>(v) || pl.arena != Arena::Transient || !pl.bytes) continue;
        if (def[v] <= static_cast<int32_t>(t) && static_cast<int32_t>(t) <= last[v])
          live.push_back({pl.offset, pl.offset + pl.bytes + gb, static_cast<ValueId>(v)});
      }
      if (t < nn && p.scratch[t].bytes)
        live.push_back({p.scratch[t].offset, p.scratch[t].offset + p.scratch[t].bytes + gb, kNone});
      for (size_t i = 0; i < live.size(); ++i)
        for (size_t j = i + 1; j < live.size(); ++j) {
          if (!(live[i].b < live[j].e && live[j].b < live[i].e)) continue;
          if (!handover(t, live[i], live[j]) && !handover(t, live[j], live[i])) return false;
        }
    }
    return true;
  }

  template <class Buf>
  bool handover(size_t t, const Buf& in, const Buf& out) const {
    if (t >= g.num_nodes() || in.c == kNone || out.c == kNone || in.b != out.b) return false;
    const Node& n = g.node(static_cast<NodeId>(t));
    const int ii = op_def(n.op).traits.inplace_input;
    if (ii < 0) return false;
    return content[static_cast<size_t>(n.inputs[static_cast<size_t>(ii)])] == in.c && n.outputs[0] == out.c &&
           last[static_cast<size_t>(in.c)] == static_cast<int32_t>(t) && def[static_cast<size_t>(out.c)] == static_cast<int32_t>(t);
  }
};

// The most bytes live at once in the plan's own alias sets, each buffer
// rounded up as the planner must (alignment, guard): what no placement of
// these sets can beat.
size_t aligned_live_peak(const Graph& g, const Plan& p) {
  const size_t nn = g.num_nodes(), al = p.options.alignment, gb = p.options.guard_bytes;
  auto up = [&](size_t x) { return (x + gb + al - 1) / al * al; };
  std::vector<size_t> live(nn + 1, 0);
  for (size_t v = 0; v < g.num_values(); ++v) {
    const Placement& pl = p.values[v];
    if (pl.arena != Arena::Transient || pl.root != static_cast<ValueId>(v) || !pl.bytes) continue;
    for (int32_t t = std::max(pl.first, 0); t <= std::min<int32_t>(pl.last, static_cast<int32_t>(nn)); ++t)
      live[static_cast<size_t>(t)] += up(pl.bytes);
  }
  for (size_t k = 0; k < nn; ++k)
    if (p.scratch[k].bytes) live[k] += up(p.scratch[k].bytes);
  return *std::max_element(live.begin(), live.end());
}

// Transient owners (contents) and their lifetimes, for targeted corruptions.
std::vector<std::pair<size_t, size_t>> live_together(const Oracle& o, const Plan& p) {
  std::vector<size_t> owners;
  for (size_t v = 0; v < p.values.size(); ++v)
    if (o.content[v] == static_cast<ValueId>(v) && p.values[v].arena == Arena::Transient && p.values[v].bytes)
      owners.push_back(v);
  std::vector<std::pair<size_t, size_t>> r;
  for (size_t i = 0; i < owners.size(); ++i)
    for (size_t j = i + 1; j < owners.size(); ++j) {
      const size_t a = owners[i], b = owners[j];
      // Overlapping lifetimes by more than a single hand-over node.
      const int32_t lo = std::max(o.def[a], o.def[b]), hi = std::min(o.last[a], o.last[b]);
      if (hi - lo >= 1) r.push_back({a, b});
    }
  return r;
}

}  // namespace

TEST(Planner, RandomGraphsVerifyAndStayNearTheLowerBound) {
  std::mt19937_64 rng(20240611);
  double ratio_sum = 0.0, worst = 1.0;
  int planned = 0;
  for (int it = 0; it < 1000; ++it) {
    auto rs = random_step(rng);
    const Graph& g = rs->g;
    const PlanOptions opt = random_options(rng);
    const auto vb = bytes_of(g);
    const Plan p = make_plan(g, vb, rs->scratch, opt);
    ASSERT_EQ(verify_plan(g, p, vb, rs->scratch), "") << "graph " << it;
    const size_t arena = p.arena_bytes[static_cast<size_t>(Arena::Transient)];
    ASSERT_GE(arena, p.peak_live_bytes) << "graph " << it;
    ASSERT_LE(arena, p.naive_transient_bytes + g.num_values() * (opt.guard_bytes + opt.alignment)) << "graph " << it;
    // Same inputs, same plan.
    const Plan q = make_plan(g, vb, rs->scratch, opt);
    for (size_t v = 0; v < g.num_values(); ++v) ASSERT_EQ(p.values[v].offset, q.values[v].offset);
    if (!opt.no_plan && p.peak_live_bytes > 0) {
      const double r = static_cast<double>(arena) / static_cast<double>(aligned_live_peak(g, p));
      ratio_sum += r;
      worst = std::max(worst, r);
      ++planned;
    }
  }
  ASSERT_GT(planned, 500);
  const double mean = ratio_sum / planned;
  std::printf("arena / peak live bytes (aligned) over %d random plans: mean %.3f, worst %.3f\n", planned, mean, worst);
  // The bound is not always reachable (placement is NP-hard in general);
  // measured when written: mean 1.004, worst 1.095.
  EXPECT_LT(mean, 1.03);
  EXPECT_LT(worst, 1.25);
}

TEST(Planner, OracleAgreesWithVerifierOnPerturbedPlans) {
  std::mt19937_64 rng(7);
  int rejected = 0, accepted = 0;
  for (int it = 0; it < 200; ++it) {
    auto rs = random_step(rng);
    const Graph& g = rs->g;
    PlanOptions opt = random_options(rng);
    const auto vb = bytes_of(g);
    const Plan p = make_plan(g, vb, rs->scratch, opt);
    const Oracle oracle(g);
    ASSERT_TRUE(oracle.sound(p, vb, rs->scratch)) << "graph " << it << ": the oracle rejects a fresh plan";
    for (int m = 0; m < 20; ++m) {
      Plan bad = p;
      const size_t v = static_cast<size_t>(rng() % g.num_values());
      if (!bad.values[v].bytes) continue;
      const size_t arena = bad.arena_bytes[static_cast<size_t>(bad.values[v].arena)];
      const size_t al = opt.alignment;
      // Move one buffer to a random aligned offset (views move with it only
      // if the oracle says that is fine, which it is not).
      bad.values[v].offset = (rng() % std::max<size_t>(1, arena / al)) * al;
      const bool sound = oracle.sound(bad, vb, rs->scratch);
      const bool ok = verify_plan(g, bad, vb, rs->scratch).empty();
      ASSERT_EQ(ok, sound) << "graph " << it << ", value '" << g.value(static_cast<ValueId>(v)).name
                           << "' moved to " << bad.values[v].offset << ": verify says "
                           << verify_plan(g, bad, vb, rs->scratch);
      (sound ? accepted : rejected)++;
    }
  }
  std::printf("perturbed plans: %d rejected, %d still sound\n", rejected, accepted);
  EXPECT_GT(rejected, 1000);
  EXPECT_GT(accepted, 100);
}

TEST(Planner, TargetedCorruptionsAreRejected) {
  std::mt19937_64 rng(99);
  int cases = 0;
  for (int it = 0; it < 40; ++it) {
    auto rs = random_step(rng);
    const Graph& g = rs->g;
    PlanOptions opt = random_options(rng);
    opt.no_plan = false;
    const auto vb = bytes_of(g);
    const Plan p = make_plan(g, vb, rs->scratch, opt);
    ASSERT_EQ(verify_plan(g, p, vb, rs->scratch), "");
    const Oracle oracle(g);
    const size_t T = static_cast<size_t>(Arena::Transient);

    // Two buffers live together moved onto each other.
    for (auto [a, b] : live_together(oracle, p)) {
      Plan bad = p;
      bad.values[b].offset = bad.values[a].offset;
      EXPECT_NE(verify_plan(g, bad, vb, rs->scratch), "") << "shifted '" << g.value(static_cast<ValueId>(b)).name
                                                          << "' onto '" << g.value(static_cast<ValueId>(a)).name << "'";
      ++cases;
      break;
    }
    // A scratch moved onto a value live at its node.
    for (size_t k = 0; k < g.num_nodes(); ++k) {
      if (!p.scratch[k].bytes) continue;
      const Node& n = g.node(static_cast<NodeId>(k));
      for (ValueId in : n.inputs) {
        const size_t c = static_cast<size_t>(oracle.content[static_cast<size_t>(in)]);
        if (p.values[c].arena != Arena::Transient || !p.values[c].bytes) continue;
        Plan bad = p;
        bad.scratch[k].offset = p.values[c].offset;
        EXPECT_NE(verify_plan(g, bad, vb, rs->scratch), "") << "scratch of node " << k << " onto its input";
        ++cases;
        break;
      }
      break;
    }
    // Misaligned offset, shrunk arena, shrunk buffer.
    for (size_t v = 0; v < g.num_values(); ++v) {
      if (p.values[v].arena != Arena::Transient || !p.values[v].bytes || oracle.content[v] != static_cast<ValueId>(v))
        continue;
      Plan bad = p;
      bad.values[v].offset += 4;
      EXPECT_NE(verify_plan(g, bad, vb, rs->scratch), "") << "misaligned";
      bad = p;
      bad.values[v].bytes -= 1;
      EXPECT_NE(verify_plan(g, bad, vb, rs->scratch), "") << "shrunk buffer";
      cases += 2;
      break;
    }
    {
      // The arena cut to one byte less than its highest buffer (with guard).
      size_t top = 0;
      for (size_t v = 0; v < g.num_values(); ++v)
        if (p.values[v].arena == Arena::Transient && p.values[v].bytes)
          top = std::max(top, p.values[v].offset + p.values[v].bytes + opt.guard_bytes);
      for (const auto& s : p.scratch)
        if (s.bytes) top = std::max(top, s.offset + s.bytes + opt.guard_bytes);
      Plan bad = p;
      bad.arena_bytes[T] = top - 1;
      EXPECT_NE(verify_plan(g, bad, vb, rs->scratch), "") << "shrunk arena";
      ++cases;
    }
    // A view moved off its base.
    for (size_t v = 0; v < g.num_values(); ++v) {
      if (oracle.content[v] == static_cast<ValueId>(v) || !p.values[v].bytes) continue;
      Plan bad = p;
      bad.values[v].offset += opt.alignment;
      EXPECT_NE(verify_plan(g, bad, vb, rs->scratch), "") << "view off its base";
      ++cases;
      break;
    }
    // Two pinned buffers (parameters or gradients) overlapping.
    for (Arena a : {Arena::Params, Arena::Grads, Arena::OptState}) {
      std::vector<size_t> own;
      for (size_t v = 0; v < g.num_values(); ++v)
        if (p.values[v].arena == a && p.values[v].bytes && oracle.content[v] == static_cast<ValueId>(v)) own.push_back(v);
      if (own.size() < 2) continue;
      Plan bad = p;
      bad.values[own[1]].offset = bad.values[own[0]].offset;
      EXPECT_NE(verify_plan(g, bad, vb, rs->scratch), "") << "pinned overlap in " << arena_name(a);
      ++cases;
    }
  }
  EXPECT_GT(cases, 200);
}

TEST(Planner, InPlaceOnlyAtTheLastUse) {
  // x -> relu -> a -> relu -> b; a is also read later by add(b, a): the
  // second relu must not take a's bytes, the first may take x's.
  Graph g;
  Builder bld(g, true);
  ValueId x = g.input("x", {4, 8});
  ValueId h = linear(bld, x, 8, {.name = "fc0"});
  ValueId a = relu(bld, h);
  ValueId b = relu(bld, a);
  ValueId c = add(bld, b, a);
  g.value(c).is_output = true;
  const auto vb = bytes_of(g);
  const Plan p = make_plan(g, vb, std::vector<size_t>(g.num_nodes(), 0));
  ASSERT_EQ(verify_plan(g, p, vb, {}), "");
  EXPECT_EQ(p.values[static_cast<size_t>(a)].root, p.values[static_cast<size_t>(h)].root) << "relu after its input's last use runs in place";
  EXPECT_NE(p.values[static_cast<size_t>(b)].offset, p.values[static_cast<size_t>(a)].offset) << "a is read after b is made";
  // The output is pinned to the end of the step: nothing may reuse it.
  EXPECT_EQ(p.values[static_cast<size_t>(c)].last, static_cast<int32_t>(g.num_nodes()));
  // Forcing the second relu onto a's bytes must be caught.
  Plan bad = p;
  bad.values[static_cast<size_t>(b)].offset = p.values[static_cast<size_t>(a)].offset;
  EXPECT_NE(verify_plan(g, bad, vb, {}), "");
}

TEST(Planner, GradientsMirrorParameters) {
  std::mt19937_64 rng(3);
  for (int it = 0; it < 20; ++it) {
    auto rs = random_step(rng);
    const Graph& g = rs->g;
    const Plan p = make_plan(g, bytes_of(g), rs->scratch);
    // Gradient offsets increase in the order of their parameters.
    size_t prev = 0;
    bool first = true;
    for (ValueId w : g.trainable_params()) {
      const ValueId dw = g.value(w).grad;
      if (dw == kNone) continue;
      const Placement& pl = p.values[static_cast<size_t>(dw)];
      ASSERT_EQ(pl.arena, Arena::Grads);
      if (!first) {
        EXPECT_GT(pl.offset, prev) << g.value(dw).name;
      }
      prev = pl.offset;
      first = false;
    }
  }
}

TEST(Planner, NoPlanGivesEveryValueItsOwnBytes) {
  std::mt19937_64 rng(5);
  for (int it = 0; it < 20; ++it) {
    auto rs = random_step(rng);
    PlanOptions o;
    o.no_plan = true;
    o.guard_bytes = 32;
    const auto vb = bytes_of(rs->g);
    const Plan p = make_plan(rs->g, vb, rs->scratch, o);
    ASSERT_EQ(verify_plan(rs->g, p, vb, rs->scratch), "");
    // Transient owners are disjoint for all time, not only while live.
    std::vector<std::pair<size_t, size_t>> iv;
    for (size_t v = 0; v < rs->g.num_values(); ++v) {
      const Placement& pl = p.values[v];
      if (pl.arena == Arena::Transient && pl.root == static_cast<ValueId>(v) && pl.bytes)
        iv.push_back({pl.offset, pl.offset + pl.bytes + o.guard_bytes});
    }
    for (const auto& s : p.scratch)
      if (s.bytes) iv.push_back({s.offset, s.offset + s.bytes + o.guard_bytes});
    std::sort(iv.begin(), iv.end());
    for (size_t i = 1; i < iv.size(); ++i) ASSERT_LE(iv[i - 1].second, iv[i].first);
  }
}

TEST(Planner, RealModelsAreSoundAndTight) {
  for (const char* model : {"convnet", "resnet18"}) {
    Graph g;
    Builder b(g, true);
    ValueId x = g.input("input", {8, 1, 28, 28});
    ValueId labels = g.input("labels", {8}, DType::i32);
    ValueId logits = models::find_model(model)(b, x, 10);
    g.value(logits).is_output = true;
    build_backward(g, softmax_xent(b, logits, labels));
    OptimizerConfig oc;
    oc.kind = "sgd";
    oc.momentum = 0.9;
    append_optimizer(g, oc);
    const auto vb = bytes_of(g);
    std::vector<size_t> scratch(g.num_nodes(), 0);
    std::mt19937_64 rng(1);
    for (size_t k = 0; k < scratch.size(); ++k)
      if (g.node(static_cast<NodeId>(k)).op.rfind("conv2d", 0) == 0) scratch[k] = 4096 + rng() % (1 << 20);
    const Plan p = make_plan(g, vb, scratch);
    ASSERT_EQ(verify_plan(g, p, vb, scratch), "") << model;
    const size_t arena = p.arena_bytes[static_cast<size_t>(Arena::Transient)];
    const double r = static_cast<double>(arena) / static_cast<double>(p.peak_live_bytes);
    std::printf("%s: arena %zu, peak live %zu (x%.3f), no reuse %zu (x%.2f)\n", model, arena, p.peak_live_bytes, r,
                p.naive_transient_bytes, static_cast<double>(p.naive_transient_bytes) / static_cast<double>(arena));
    // Measured when written: convnet 1.14 (a few large buffers that cannot
    // all pack), resnet18 1.003.
    EXPECT_LT(r, std::string(model) == "convnet" ? 1.2 : 1.05) << model;
  }
}

TEST(Planner, EveryStepGraphTheTrainerBuildsIsSound) {
  // Real step graphs under every memory policy the trainer offers:
  // recomputation, accumulation, frozen layers, evaluation graphs.
  std::mt19937_64 rng(17);
  int n = 0;
  for (const char* model : {"convnet", "resnet18"})
    for (const char* rc : {"none", "cheap", "segments"})
      for (int variant = 0; variant < 4; ++variant) {
        train::StepSpec spec;
        spec.model = model;
        spec.batch = 4;
        spec.recompute = rc;
        spec.optimizer.kind = variant == 2 ? "adam" : "sgd";
        spec.optimizer.momentum = 0.9;
        if (variant == 1) spec.accumulation = 2;
        if (variant == 2) spec.freeze = {"conv1"};
        if (variant == 3) {
          spec.training = false;
          spec.with_loss = false;
        }
        auto sg = train::build_step_graph(spec);
        const Graph& g = sg->g;
        const auto vb = bytes_of(g);
        std::vector<size_t> scratch(g.num_nodes(), 0);
        for (size_t& s : scratch)
          if (rng() % 3 == 0) s = 64 + rng() % 100000;
        for (const PlanOptions& o : {PlanOptions{}, PlanOptions{.no_plan = true}, PlanOptions{.guard_bytes = 64}}) {
          const Plan p = make_plan(g, vb, scratch, o);
          ASSERT_EQ(verify_plan(g, p, vb, scratch), "") << model << " recompute " << rc << " variant " << variant;
          ++n;
        }
        const Plan p = make_plan(g, vb, scratch);
        EXPECT_TRUE(Oracle(g).sound(p, vb, scratch)) << model << " recompute " << rc << " variant " << variant;
      }
  EXPECT_EQ(n, 72);
}
