// The RNN family (src/ops/rnn/op.cpp): the Elman cells (tanh, relu) and the
// GRU. Gradient checks in double against finite differences, the fast CPU
// kernels against the reference, shape inference's refusals, and a timing
// print. Against PyTorch: test_onnx's RNN and GRU classifiers (torch's
// nn.RNN and nn.GRU through their ONNX export).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "gradcheck.hpp"
#include "graph_run.hpp"
#include "memfit/autodiff.hpp"
#include "runtime/kernel_table.hpp"

using namespace memfit;
using memfit::testing::GradInput;

namespace {

struct Case {
  int64_t N, T, I, H;
  const char* cell;
};

// One rnn node on x, its weights trainable parameters U(-1/sqrt(H), 1/sqrt(H))
// as PyTorch draws them. Returns {y, h_last}.
std::vector<ValueId> rnn_node(Builder& b, ValueId x, const Case& c, const std::string& layer = "rnn") {
  Graph& g = b.g;
  const int64_t G = std::string(c.cell) == "gru" ? 3 * c.H : c.H;
  InitSpec u;
  u.kind = InitSpec::Uniform;
  u.bound = 1.0 / std::sqrt(double(c.H));
  std::vector<ValueId> ins{x};
  for (auto [name, shape] : std::vector<std::pair<const char*, Shape>>{
           {"weight_ih", {G, c.I}}, {"weight_hh", {G, c.H}}, {"bias_ih", {G}}, {"bias_hh", {G}}}) {
    const ValueId p = g.param(layer + "." + name, shape);
    g.value(p).init = u;
    ins.push_back(p);
  }
  auto outs = g.add_node("rnn", ins, {{"cell", std::string(c.cell)}}, layer);
  return {outs[0], outs[1]};
}

// which: 0 both outputs, 1 y only, 2 h_last only.
void check_case(const Case& c, int which = 0) {
  // relu: a central difference straddles the kink only where a
  // pre-activation lies within ~h |w| (~1e-6) of 0; with pre-activations
  // of order 1 drawn from a fixed seed that is a ~1e-6 chance per value, and
  // a kink hit would show as an O(1) mismatch, not pass silently.
  memfit::testing::GradCheckOptions opt;
  memfit::testing::grad_check({GradInput{{c.N, c.T, c.I}}}, [&](Builder& b, const std::vector<ValueId>& in) {
    auto r = rnn_node(b, in[0], c);
    if (which == 1) return r[0];
    if (which == 2) return r[1];
    const Shape ys = b.g.value(r[0]).shape;
    return concat(b, {reshape(b, r[0], {ys[0], ys[1] * ys[2]}), r[1]}, 1);
  }, opt);
}

}  // namespace

// ------------------------------------------------------------ gradients ----

TEST(RnnGrad, Tanh) { check_case({2, 4, 3, 5, "tanh"}); }
TEST(RnnGrad, TanhOnlyY) { check_case({2, 3, 3, 4, "tanh"}, 1); }
TEST(RnnGrad, TanhOnlyHLast) { check_case({2, 3, 3, 4, "tanh"}, 2); }
TEST(RnnGrad, Relu) { check_case({2, 4, 3, 5, "relu"}); }
TEST(RnnGrad, Gru) { check_case({2, 4, 3, 5, "gru"}); }
TEST(RnnGrad, GruBatchOfOneHiddenOne) { check_case({1, 3, 4, 1, "gru"}); }
TEST(RnnGrad, GruOnlyY) { check_case({2, 3, 2, 3, "gru"}, 1); }
TEST(RnnGrad, GruOnlyHLast) { check_case({3, 4, 2, 3, "gru"}, 2); }

// ------------------------------------------------------- shape inference ----

TEST(RnnGraph, ShapesAndRefusals) {
  Graph g;
  Builder b(g);
  const ValueId x = g.input("x", {2, 7, 5});
  auto r = rnn_node(b, x, {2, 7, 5, 3, "gru"});
  EXPECT_EQ(g.value(r[0]).shape, (Shape{2, 7, 3}));
  EXPECT_EQ(g.value(r[1]).shape, (Shape{2, 3}));
  const Node& n = g.node(g.value(r[0]).producer);
  ASSERT_EQ(n.outputs.size(), 3u);
  EXPECT_EQ(g.value(n.outputs[2]).shape, (Shape{7, 2, 12}));  // gates [T, N, 4H]
  auto e = rnn_node(b, x, {2, 7, 5, 3, "tanh"}, "elman");
  EXPECT_EQ(g.node(g.value(e[0]).producer).outputs.size(), 2u);
  auto message = [&](std::vector<ValueId> ins, const std::string& cell) {
    try {
      g.add_node("rnn", ins, {{"cell", cell}}, "bad_rnn");
    } catch (const GraphError& err) {
      return std::string(err.what());
    }
    return std::string("no error");
  };
  const ValueId wih = g.param("w_ih", {9, 4}), whh = g.param("w_hh", {9, 3}), bb = g.param("b", {9});
  EXPECT_NE(message({x, wih, whh, bb, bb}, "gru").find("w_ih must be a float [9, 5]"), std::string::npos)
      << message({x, wih, whh, bb, bb}, "gru");
  EXPECT_NE(message({x, wih, whh, bb, bb}, "tanh").find("w_hh must be [H, H]"), std::string::npos);
  EXPECT_NE(message({x, wih, whh, bb, bb}, "lstm").find("cell must be tanh, relu or gru, got 'lstm'"), std::string::npos);
}

// ------------------------------------------------- fast CPU vs reference ----
//
// Tolerance: |cpu - ref| <= 1e-6 + 1e-5 * max|ref| per tensor. Both are f32
// with the same activation functions (std::exp, std::tanh); they differ in
// summation order only (oneDNN's blocked products against the reference's
// row loops, <= I + H terms per gate, <= N T rows per weight gradient:
// ~sqrt(N T) 2^-24 relative, 1.4e-6 at N T = 576). tanh and the GRU's
// convex update are contractions, so the recurrence does not amplify these
// errors over the steps (the relu cell's weights are drawn small enough,
// 1/sqrt(H), that it does not blow up over these T either). A wrong index
// or a missing term is off by O(max|ref|).

namespace {

struct Built {
  Graph g;
  ValueId x, r;
  std::vector<ValueId> reads;
};

std::unique_ptr<Built> build_objective(const Case& k) {
  auto s = std::make_unique<Built>();
  Graph& g = s->g;
  Builder b(g);
  s->x = g.input("x", {k.N, k.T, k.I});
  auto out = rnn_node(b, s->x, k);
  const ValueId all = concat(b, {reshape(b, out[0], {k.N, k.T * k.H}), out[1]}, 1);
  const int64_t n = numel(g.value(all).shape);
  s->r = g.input("r", {1, n});
  const ValueId loss = reshape(b, g.add1("linear", {reshape(b, all, {1, n}), s->r}, {}, "objective"), {1});
  g.value(loss).is_output = true;
  const BackwardResult bw = build_backward(g, loss, {s->x});
  s->reads = {out[0], out[1]};
  for (auto& [leaf, gv] : bw.grads) s->reads.push_back(gv);
  for (ValueId v : s->reads) g.value(v).is_output = true;
  return s;
}

}  // namespace

TEST(RnnCpu, MatchesReference) {
  const std::vector<Case> cases = {
      {1, 1, 1, 1, "tanh"}, {3, 7, 5, 17, "tanh"}, {4, 6, 9, 24, "relu"}, {1, 1, 1, 1, "gru"},
      {3, 7, 5, 17, "gru"}, {64, 9, 16, 24, "gru"}, {64, 9, 16, 24, "tanh"},
      {3, 5, 4, 160, "gru"}, {3, 5, 4, 160, "relu"},  // H > 128: one oneDNN product per step
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(std::string(k.cell) + " N" + std::to_string(k.N) + " T" + std::to_string(k.T) + " I" +
                 std::to_string(k.I) + " H" + std::to_string(k.H));
    auto s = build_objective(k);
    int kernels_seen = 0;
    for (const Node& n : s->g.nodes())
      if (n.op == "rnn" || n.op == "rnn_bwd") {
        auto kern = make_kernel(s->g, n, Backend::Cpu);
        EXPECT_EQ(std::string(kern->name()), n.op == "rnn" ? "cpu.rnn" : "cpu.rnn_bwd");
        ++kernels_seen;
      }
    EXPECT_EQ(kernels_seen, 2);
    std::mt19937_64 gen(3);
    std::uniform_real_distribution<float> U(-1.0f, 1.0f);
    memfit::testing::GraphData d;
    for (ValueId v : {s->x, s->r}) {
      auto& f = d.floats[v];
      f.resize(size_t(numel(s->g.value(v).shape)));
      for (float& e : f) e = U(gen);
    }
    memfit::testing::expect_cpu_matches_reference(s->g, d, s->reads);
  }
}

// A timing print (no bound: the machine's load varies): one forward and
// backward of a GRU and an Elman layer on the CPU, at a text classifier's
// sizes and at a hidden size past the per-sample recurrence's cache fit.
TEST(RnnBench, StepTime) {
  for (const Case& k : {Case{64, 100, 64, 128, "gru"}, Case{64, 100, 64, 128, "tanh"}, Case{64, 50, 64, 512, "gru"}}) {
    auto s = build_objective(k);
    memfit::testing::GraphData d;
    for (ValueId v : {s->x, s->r}) d.floats[v].assign(size_t(numel(s->g.value(v).shape)), 0.01f);
    ExecConfig cfg;
    cfg.backend = Backend::Cpu;
    Executor ex(s->g, cfg);
    ex.init_params(1);
    for (auto& [v, f] : d.floats) ex.write_f32(v, f.data());
    kernels::StepContext ctx;
    ex.run(ctx);
    const int reps = 5;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) ex.run(ctx);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
    std::printf("rnn %s N%lld T%lld I%lld H%lld: fwd+bwd %.2f ms (Cpu)\n", k.cell, (long long)k.N, (long long)k.T,
                (long long)k.I, (long long)k.H, ms);
  }
}
