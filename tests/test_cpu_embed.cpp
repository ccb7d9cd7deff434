// The fast CPU kernels of embedding, embedding_bwd and permute against the
// reference kernels (the oracle), and the broadcast matmul's gradient graph
// (matmuls over views and permuted copies) on Backend::Cpu against
// Backend::Reference. Every run has guard bytes after each planned buffer
// (graph_run.hpp).
//
// Tolerances.
//  - Gathers and permutes copy: exact. A bf16 embedding output is rounded
//    once (nearest even) from the same f32 value on both sides: exact.
//  - embedding_bwd: exact. Both kernels add the same f32 (or exactly widened
//    bf16) values in the same order (ascending id position per element), so
//    they agree bit for bit whatever the thread count; that is the
//    determinism the op promises, tested with 1, 2 and 3 threads.
//  - Graphs with products (the tied LM head, the broadcast matmul
//    gradients): test_cpu_kernels.cpp's rule, |cpu - ref| <= 1e-5 * sum|term|
//    with sum|term| from the reference run on |inputs| (every term of these
//    outputs is a product of inputs with coefficient +1). oneDNN sums in its
//    own blocked order; 1e-5 is ~80 f32 ulps of the terms' total, far above
//    reordering error at these sizes (< 10^4 terms) and far below a missing
//    or misplaced term.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "graph_run.hpp"
#include "kernels/cpu/engine.hpp"
#include "memfit/autodiff.hpp"
#include "memfit/builder.hpp"
#include "memfit/plan.hpp"
#include "runtime/kernel_table.hpp"

using namespace memfit;
using memfit::testing::GraphData;
using memfit::testing::run_graph;
using memfit::testing::same_bits;
using memfit::testing::Values;

namespace {

constexpr double kRtol = 1e-5;  // products, relative to sum |term| (header)

// Uniform [-1, 1) floats for every float input and parameter, ids in
// [0, vocab) for i32 inputs: a few values repeat most of the time (a
// padding id 0 half the time, then ids 1..3), the rest spread.
GraphData feed_for(const Graph& g, uint64_t seed, int32_t vocab) {
  GraphData d;
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> U(-1.0f, 1.0f);
  for (size_t i = 0; i < g.num_values(); ++i) {
    const Value& v = g.value(static_cast<ValueId>(i));
    if (v.cls != VClass::Input && v.cls != VClass::Param) continue;
    const auto n = static_cast<size_t>(numel(v.shape));
    if (v.dtype == DType::i32) {
      auto& x = d.ints[static_cast<ValueId>(i)];
      for (size_t k = 0; k < n; ++k) {
        const uint64_t r = gen() % 8;
        x.push_back(r < 4 ? 0 : r < 6 ? static_cast<int32_t>(1 + gen() % 3) % vocab : static_cast<int32_t>(gen() % uint64_t(vocab)));
      }
    } else {
      auto& x = d.floats[static_cast<ValueId>(i)];
      for (size_t k = 0; k < n; ++k) x.push_back(U(gen));
    }
  }
  return d;
}

// The kernel Backend::Cpu makes for the node that computes v.
std::string cpu_kernel(const Graph& g, ValueId v) {
  auto k = make_kernel(g, g.node(g.value(v).producer), Backend::Cpu);
  return k ? k->name() : "(none)";
}

// One run on each backend of a graph of copies (gathers, permutes, the
// scatter-add): the same bits.
void expect_same_as_reference(const Graph& g, ValueId out, uint64_t seed, int32_t vocab) {
  const GraphData d = feed_for(g, seed, vocab);
  EXPECT_TRUE(same_bits(run_graph(g, Backend::Cpu, d, {out}).at(out), run_graph(g, Backend::Reference, d, {out}).at(out)));
}

// The name a bf16 node's Cpu kernel has: its own, or the f32 kernel's
// between conversions in a build without the bf16 loops.
std::string bf16_name(const std::string& own, const std::string& f32) {
  return kernels::cpu::bf16_kernels_available() ? own : "bf16(" + f32 + ")";
}

// Cpu against Reference for graphs of products (header: tolerance).
void expect_products_close(const Graph& g, const std::vector<ValueId>& outs, uint64_t seed, int32_t vocab = 1) {
  GraphData d = feed_for(g, seed, vocab);
  const Values cpu = run_graph(g, Backend::Cpu, d, outs);
  const Values ref = run_graph(g, Backend::Reference, d, outs);
  for (auto& [v, x] : d.floats)
    for (float& f : x) f = std::abs(f);
  const Values mag = run_graph(g, Backend::Reference, d, outs);
  for (ValueId v : outs) {
    const auto& c = cpu.at(v);
    size_t bad = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      const double tol = kRtol * std::abs(static_cast<double>(mag.at(v)[i]));
      if (std::isfinite(c[i]) && std::abs(static_cast<double>(c[i]) - ref.at(v)[i]) <= tol) continue;
      if (++bad <= 5)
        ADD_FAILURE() << g.value(v).name << "[" << i << "]: cpu " << c[i] << " ref " << ref.at(v)[i] << " tol " << tol;
    }
    EXPECT_EQ(bad, 0u) << g.value(v).name;
  }
}

struct EmbedCase {
  Shape ids;
  int64_t V, D;
};

const std::vector<EmbedCase>& embed_cases() {
  static const std::vector<EmbedCase> cases = {
      {{37}, 50, 1},     {{5, 9}, 11, 7},    {{4, 16}, 3, 16},
      {{2, 3, 5}, 7, 19}, {{64}, 1000, 200}, {{8, 512}, 97, 48},  // 8 x 512: threads
  };
  return cases;
}

std::string case_str(const EmbedCase& c) {
  return shape_str(c.ids) + " V" + std::to_string(c.V) + " D" + std::to_string(c.D);
}

}  // namespace

// ----------------------------------------------------------- embedding ----

TEST(CpuEmbedding, ForwardMatchesReference) {
  for (const EmbedCase& c : embed_cases())
    for (DType out : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(case_str(c) + " " + dtype_name(out));
      Graph g;
      ValueId ids = g.input("ids", c.ids, DType::i32);
      ValueId table = g.input("table", {c.V, c.D});
      ValueId y = g.add1("embedding", {ids, table}, {{"dtype", int64_t(out)}}, "embed");
      g.value(y).is_output = true;
      EXPECT_EQ(cpu_kernel(g, y), out == DType::f32 ? "cpu.embedding" : bf16_name("cpu.embedding.bf16", "cpu.embedding"));
      expect_same_as_reference(g, y, 41, static_cast<int32_t>(c.V));
    }
}

TEST(CpuEmbedding, BackwardMatchesReferenceBitForBit) {
  for (const EmbedCase& c : embed_cases())
    for (DType act : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(case_str(c) + " dy " + dtype_name(act));
      Graph g;
      ValueId ids = g.input("ids", c.ids, DType::i32);
      Shape ys = c.ids;
      ys.push_back(c.D);
      ValueId dy = g.input("dy", ys, act);
      ValueId dt = g.add1("embedding_bwd", {ids, dy}, {{"vocab", c.V}}, "embed");
      g.value(dt).is_output = true;
      EXPECT_EQ(cpu_kernel(g, dt),
                act == DType::f32 ? "cpu.embedding_bwd" : bf16_name("cpu.embedding_bwd.bf16", "cpu.embedding_bwd"));
      expect_same_as_reference(g, dt, 43, static_cast<int32_t>(c.V));
    }
}

TEST(CpuEmbedding, BackwardIntoAnAccumulatorMatchesReferenceBitForBit) {
  // embedding_bwd(ids, dy, acc): acc's values, then dy's rows added. acc is
  // a computed transient dying at the node (a tied head's gradient), so the
  // plan gives the output acc's own buffer (in place); an input acc (kept)
  // makes the kernel copy first. Both against the reference.
  for (const EmbedCase& c : embed_cases())
    for (bool in_place : {true, false}) {
      SCOPED_TRACE(case_str(c) + (in_place ? " in place" : " copied"));
      Graph g;
      ValueId ids = g.input("ids", c.ids, DType::i32);
      Shape ys = c.ids;
      ys.push_back(c.D);
      ValueId dy = g.input("dy", ys);
      ValueId a = g.input("a", {c.V, c.D});
      ValueId acc = in_place ? g.add1("scale", {a}, {{"alpha", 2.0}}, "head") : a;
      ValueId dt = g.add1("embedding_bwd", {ids, dy, acc}, {{"vocab", c.V}}, "embed");
      g.value(dt).is_output = true;
      EXPECT_EQ(cpu_kernel(g, dt), "cpu.embedding_bwd");
      expect_same_as_reference(g, dt, 44, static_cast<int32_t>(c.V));
      if (in_place) {
        std::vector<size_t> vb;
        for (const Value& v : g.values()) vb.push_back(static_cast<size_t>(numel(v.shape)) * dtype_size(v.dtype));
        const Plan p = make_plan(g, vb, std::vector<size_t>(g.num_nodes(), 0));
        EXPECT_EQ(p.values[static_cast<size_t>(dt)].root, acc) << "the output takes over acc's buffer";
      }
    }
}

TEST(CpuEmbedding, BackwardIsTheSameForEveryThreadCount) {
  // 4096 ids, half of them one padding id, over 300 rows of 40 (two full
  // 16-lane groups and a tail): enough work for a thread team.
  Graph g;
  ValueId ids = g.input("ids", {4, 1024}, DType::i32);
  ValueId dy = g.input("dy", {4, 1024, 40});
  ValueId dt = g.add1("embedding_bwd", {ids, dy}, {{"vocab", int64_t(300)}}, "embed");
  g.value(dt).is_output = true;
  const GraphData d = feed_for(g, 47, 300);
  const int saved = omp_get_max_threads();
  std::vector<std::vector<float>> runs;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    runs.push_back(run_graph(g, Backend::Cpu, d, {dt}).at(dt));
  }
  omp_set_num_threads(saved);
  EXPECT_TRUE(same_bits(runs[0], runs[1])) << "1 vs 2 threads";
  EXPECT_TRUE(same_bits(runs[0], runs[2])) << "1 vs 3 threads";
  EXPECT_TRUE(same_bits(runs[0], run_graph(g, Backend::Reference, d, {dt}).at(dt))) << "vs the reference";
}

TEST(CpuEmbedding, TiedLmHeadStepMatchesReference) {
  // GPT-2-like: wte gathers, a linear mixes, the tied head multiplies by
  // wte^T; the table's gradient sums embedding_bwd and the head's product.
  Graph g;
  Builder b(g);
  ValueId ids = g.input("ids", {3, 8}, DType::i32);
  ValueId h = embedding(b, ids, 37, 24, {.name = "wte"});
  ValueId x = linear(b, h, 24, {.name = "mix"});
  ValueId logits = matmul(b, x, g.find("wte.weight"), false, true);  // [3, 8, 37]
  ValueId r = g.param("obj.r", {1, 3 * 8 * 37}, false);
  ValueId loss = reshape(b, g.add1("linear", {reshape(b, logits, {1, 3 * 8 * 37}), r}, {}, "obj"), {1});
  BackwardResult bw = build_backward(g, loss);
  std::vector<ValueId> grads;
  for (auto& [leaf, gv] : bw.grads) grads.push_back(gv);
  std::set<std::string> kernels;  // of the gathers and products, forward and backward
  for (const Node& n : g.nodes())
    if (n.op == "embedding" || n.op == "embedding_bwd" || n.op == "matmul") kernels.insert(cpu_kernel(g, n.outputs[0]));
  EXPECT_EQ(kernels, (std::set<std::string>{"cpu.embedding", "cpu.embedding_bwd", "dnnl.matmul"}));
  expect_products_close(g, grads, 53, 37);
}

// -------------------------------------------------------------- permute ----

TEST(CpuPermute, MatchesReferenceBitForBit) {
  struct Case {
    Shape x;
    std::vector<int64_t> perm;
  };
  const std::vector<Case> cases = {
      {{70}, {0}},                          // identity: one copy
      {{33, 70}, {1, 0}},                   // 2-d transpose with tile tails
      {{64, 70, 37}, {2, 1, 0}},            // threads; tails on both tile axes
      {{64, 70, 37}, {1, 0, 2}},            // last axis kept: row copies
      {{3, 5, 7}, {0, 2, 1}},               {{3, 5, 7}, {1, 2, 0}}, {{3, 5, 7}, {2, 0, 1}},
      {{2, 6, 4, 8}, {0, 2, 1, 3}},         // attention heads [B, T, H, Dh] -> [B, H, T, Dh]
      {{2, 6, 4, 8}, {0, 2, 3, 1}},         // and K^T per head
      {{4, 1, 5, 1, 3}, {3, 4, 2, 1, 0}},   // extent-1 axes dropped
      {{2, 3, 4, 5, 6}, {4, 0, 3, 1, 2}},   {{2, 3, 4, 5, 6}, {0, 1, 2, 4, 3}},
      {{6, 5, 4}, {0, 1, 2}},               // identity of rank 3
      {{2, 3, 4, 5}, {2, 3, 0, 1}},         // merges into a 2-d transpose
  };
  for (const Case& c : cases)
    for (DType dt : {DType::f32, DType::bf16, DType::i32}) {
      SCOPED_TRACE(shape_str(c.x) + " perm " + shape_str(c.perm) + " " + dtype_name(dt));
      Graph g;
      ValueId x = g.input("x", c.x, dt);
      ValueId y = g.add1("permute", {x}, {{"perm", c.perm}}, "permute");
      g.value(y).is_output = true;
      EXPECT_EQ(cpu_kernel(g, y), "cpu.permute");
      expect_same_as_reference(g, y, 59, 1 << 20);
    }
}

// ------------------------------------------------- broadcast matmul -------

TEST(CpuMatmulBroadcast, GradientsMatchReference) {
  for (int shared = 0; shared < 2; ++shared)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        SCOPED_TRACE("shared operand " + std::to_string(shared) + " trans_a=" + std::to_string(ta) +
                     " trans_b=" + std::to_string(tb));
        const int64_t M = 9, K = 20, N = 17;
        Shape a = ta ? Shape{K, M} : Shape{M, K};
        Shape c = tb ? Shape{N, K} : Shape{K, N};
        Shape& batched = shared == 0 ? c : a;
        batched.insert(batched.begin(), {2, 3});
        Graph g;
        Builder b(g);
        ValueId va = g.input("a", a), vc = g.input("c", c);
        ValueId y = matmul(b, va, vc, ta, tb);
        const int64_t n = numel(g.value(y).shape);
        ValueId r = g.param("obj.r", {1, n}, false);
        ValueId loss = reshape(b, g.add1("linear", {reshape(b, y, {1, n}), r}, {}, "obj"), {1});
        BackwardResult bw = build_backward(g, loss, {va, vc});
        expect_products_close(g, {bw.grads.at(va), bw.grads.at(vc)}, 61);
      }
}
