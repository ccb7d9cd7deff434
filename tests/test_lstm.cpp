// LSTM (src/ops/lstm/op.cpp): gradient checks in double, the fast CPU
// kernels against the reference, PyTorch goldens (tests/golden/
// make_lstm_golden.py: nn.LSTM over a packed sequence and the
// lstm-classifier's training step), and a timing print.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "gradcheck.hpp"
#include "graph_run.hpp"
#include "io/safetensors.hpp"
#include "memfit/autodiff.hpp"
#include "models/model.hpp"
#include "runtime/kernel_table.hpp"
#include "compile/step_graph.hpp"
#include "compile/resolve.hpp"

using namespace memfit;
using memfit::testing::GradInput;

namespace {

GradInput f32_in(Shape s) { return GradInput{std::move(s)}; }
GradInput lengths_in(std::vector<double> v) {
  GradInput g{{int64_t(v.size())}, DType::i32, false, std::move(v)};
  return g;
}

// y, and every layer's h_last and c_last, as one [N, *] value: every output's
// gradient flows into the backward.
ValueId all_outputs(Builder& b, const LstmOut& r) {
  const Shape& ys = b.g.value(r.y).shape;
  std::vector<ValueId> parts{reshape(b, r.y, {ys[0], ys[1] * ys[2]})};
  for (size_t k = 0; k < r.h_last.size(); ++k) {
    parts.push_back(r.h_last[k]);
    parts.push_back(r.c_last[k]);
  }
  return concat(b, parts, 1);
}

struct Case {
  int64_t N, T, I, H, layers;
  std::vector<double> lengths;  // empty: none
};

void check_case(const Case& c, int which = 0) {
  std::vector<GradInput> ins{f32_in({c.N, c.T, c.I})};
  if (!c.lengths.empty()) ins.push_back(lengths_in(c.lengths));
  memfit::testing::grad_check(ins, [&](Builder& b, const std::vector<ValueId>& in) {
    LstmOpts o{c.layers, "lstm", c.lengths.empty() ? kNone : in[1]};
    const LstmOut r = lstm(b, in[0], c.H, o);
    if (which == 1) return r.y;               // only dy flows
    if (which == 2) return r.h_last.back();   // only dh_last
    if (which == 3) return r.c_last.back();   // only dc_last
    return all_outputs(b, r);
  });
}

}  // namespace

// ------------------------------------------------------------ gradients ----

TEST(LstmGrad, OneLayerFullLength) { check_case({2, 4, 3, 5, 1, {}}); }
TEST(LstmGrad, OneLayerLengthsOneAndFull) { check_case({3, 5, 2, 3, 1, {5, 1, 3}}); }
TEST(LstmGrad, BatchOfOne) { check_case({1, 3, 4, 1, 1, {}}); }
TEST(LstmGrad, TwoLayersWithLengths) { check_case({3, 4, 3, 3, 2, {1, 4, 2}}); }
TEST(LstmGrad, OnlyY) { check_case({2, 4, 3, 3, 1, {2, 4}}, 1); }
TEST(LstmGrad, OnlyHLast) { check_case({2, 4, 3, 3, 1, {3, 4}}, 2); }
TEST(LstmGrad, OnlyCLastTwoLayers) { check_case({2, 3, 2, 3, 2, {3, 1}}, 3); }

TEST(LstmGraph, ParameterNamesAndShapesAsPyTorch) {
  Graph g;
  Builder b(g);
  const ValueId x = g.input("x", {2, 7, 5});
  const LstmOut r = lstm(b, x, 3, {.layers = 2});
  for (const char* n : {"lstm.weight_ih_l0", "lstm.weight_hh_l0", "lstm.bias_ih_l0", "lstm.bias_hh_l0",
                        "lstm.weight_ih_l1", "lstm.weight_hh_l1", "lstm.bias_ih_l1", "lstm.bias_hh_l1"})
    ASSERT_NE(g.find(n), kNone) << n;
  EXPECT_EQ(g.value(g.find("lstm.weight_ih_l0")).shape, (Shape{12, 5}));
  EXPECT_EQ(g.value(g.find("lstm.weight_ih_l1")).shape, (Shape{12, 3}));
  EXPECT_EQ(g.value(g.find("lstm.bias_hh_l1")).shape, (Shape{12}));
  EXPECT_EQ(g.value(g.find("lstm.weight_hh_l0")).init.bound, 1.0 / std::sqrt(3.0));
  EXPECT_EQ(g.value(r.y).shape, (Shape{2, 7, 3}));
  EXPECT_EQ(r.h_last.size(), 2u);
  EXPECT_THROW(lstm(b, g.input("bad", {2, 5}), 3), GraphError);
  // Shape inference names what is wrong.
  const ValueId wih = g.param("w_ih", {12, 4}), whh = g.param("w_hh", {12, 3}), bb = g.param("b", {12});
  auto message = [&](std::vector<ValueId> ins) {
    try {
      g.add_node("lstm", ins, {}, "bad_lstm");
    } catch (const GraphError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({x, wih, whh, bb, bb}).find("w_ih must be a float [12, 5]"), std::string::npos)
      << message({x, wih, whh, bb, bb});
  const ValueId flen = g.input("flen", {2});
  EXPECT_NE(message({x, g.param("w_ih5", {12, 5}), whh, bb, bb, flen}).find("lengths must be i32 [2]"), std::string::npos);
}

// ------------------------------------------------- fast CPU vs reference ----
//
// Tolerance: |cpu - ref| <= 1e-6 + 1e-5 * max|ref| per tensor. Both are f32;
// they differ in summation order (oneDNN's blocked products against the
// reference's row loops, <= I + H terms per gate, <= N T rows per weight
// gradient: ~sqrt(N T) 2^-24 relative, 1.4e-6 at N T = 576) and in the
// activations (vexp within 2 ulp; tanh as 2 sigmoid(2x) - 1, a few ulp of 1
// absolute). The gates and the cell's forget factor are below 1 in
// magnitude, so the recurrence does not amplify these errors over the steps.
// A wrong index or a missing term is off by O(max|ref|).

namespace {

struct Built {
  Graph g;
  ValueId x, len = kNone, r, y, h, c;
  std::vector<ValueId> reads;
};

std::unique_ptr<Built> build_objective(const Case& k) {
  auto s = std::make_unique<Built>();
  Graph& g = s->g;
  Builder b(g);
  s->x = g.input("x", {k.N, k.T, k.I});
  if (!k.lengths.empty()) s->len = g.input("lengths", {k.N}, DType::i32);
  const LstmOut r = lstm(b, s->x, k.H, {.layers = k.layers, .lengths = s->len});
  s->y = r.y, s->h = r.h_last.back(), s->c = r.c_last.back();
  const ValueId all = all_outputs(b, r);
  const int64_t n = numel(g.value(all).shape);
  s->r = g.input("r", {1, n});
  const ValueId loss = reshape(b, g.add1("linear", {reshape(b, all, {1, n}), s->r}, {}, "objective"), {1});
  g.value(loss).is_output = true;
  const BackwardResult bw = build_backward(g, loss, {s->x});
  s->reads = {s->y, s->h, s->c};
  for (auto& [leaf, gv] : bw.grads) s->reads.push_back(gv);
  for (ValueId v : s->reads) g.value(v).is_output = true;
  return s;
}

memfit::testing::GraphData feed(const Built& s, const Case& k, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> U(-1.0f, 1.0f);
  memfit::testing::GraphData d;
  for (ValueId v : {s.x, s.r}) {
    auto& f = d.floats[v];
    f.resize(size_t(numel(s.g.value(v).shape)));
    for (float& e : f) e = U(gen);
  }
  if (s.len != kNone)
    for (double l : k.lengths) d.ints[s.len].push_back(int32_t(l));
  return d;
}

const std::vector<Case>& cpu_cases() {
  static const std::vector<Case> cases = {
      {1, 1, 1, 1, 1, {}},
      {3, 7, 5, 17, 1, {}},                  // H not a multiple of the vector width
      {5, 4, 33, 20, 1, {4, 1, 3, 0, 2}},    // lengths 0, 1 and full
      {2, 5, 3, 7, 2, {5, 2}},               // two layers
      {3, 4, 5, 160, 1, {4, 2, 3}},          // H > 128: one oneDNN product per step
      {64, 9, 16, 32, 1, {9, 1, 5, 9, 8, 2, 7, 3, 9, 1, 4, 6, 9, 9, 2, 5, 1, 8, 3, 7, 9, 4, 6, 2, 9, 1, 5, 8, 3, 7, 9, 2,
                          4, 6, 9, 1, 8, 5, 3, 7, 2, 9, 6, 4, 1, 9, 8, 3, 5, 7, 2, 6, 9, 4, 1, 8, 3, 9, 5, 7, 2, 6, 4, 9}},
  };
  return cases;
}

}  // namespace

TEST(LstmCpu, MatchesReference) {
  for (const Case& k : cpu_cases()) {
    SCOPED_TRACE("N" + std::to_string(k.N) + " T" + std::to_string(k.T) + " I" + std::to_string(k.I) + " H" +
                 std::to_string(k.H) + " layers " + std::to_string(k.layers));
    auto s = build_objective(k);
    for (const Node& n : s->g.nodes())
      if (n.op == "lstm" || n.op == "lstm_bwd") {
        auto kern = make_kernel(s->g, n, Backend::Cpu);
        EXPECT_EQ(std::string(kern->name()), n.op == "lstm" ? "cpu.lstm" : "cpu.lstm_bwd");
      }
    const auto d = feed(*s, k, 3);
    memfit::testing::expect_cpu_matches_reference(s->g, d, s->reads);
  }
}

// --------------------------------------------------------------- golden ----
//
// Tolerances against PyTorch in float64 on the same f32 inputs and weights:
//  - Reference64 (double throughout): 1e-6 of the tensor's largest element;
//    the arithmetic agrees to ~1e-15, what remains is the rounding of the
//    values read back as f32 (read_f32: 2^-24 relative).
//  - f32 backends (Cpu, Reference): 2e-5 of the largest element: f32 rounding
//    (6e-8) over dot products of <= 7 terms and 5 steps of a contracting
//    recurrence stays near 1e-6; a wrong term is O(1).
//  - classifier: logits 1e-4 of the largest (as tests/test_golden.cpp), the
//    loss 1e-5 relative, every gradient within 1e-4 of its L2 norm (f32
//    reductions over <= 24 rows of <= 96 terms: ~1e-6..1e-5 relative), the 4
//    SGD losses 1e-4 relative (errors compound through the updates).

namespace {

io::SafetensorsFile golden() {
  return io::SafetensorsFile::load(std::string(MEMFIT_TEST_DATA) + "/golden/lstm.safetensors");
}
template <class T>
std::vector<T> read_as(const io::SafetensorsFile& f, const std::string& name) {
  const io::TensorInfo& t = f.at(name);
  std::vector<T> v(size_t(t.numel()));
  EXPECT_EQ(t.nbytes(), v.size() * sizeof(T)) << name;
  std::memcpy(v.data(), f.data(t), t.nbytes());
  return v;
}
std::vector<float> to_f32(const std::vector<double>& d) { return std::vector<float>(d.begin(), d.end()); }

void expect_close(const std::vector<float>& got, const std::vector<double>& ref, double rel, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double mx = 0;
  for (double r : ref) mx = std::max(mx, std::abs(r));
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(got[i] - ref[i]) <= rel * std::max(mx, 1e-3)) && ++bad <= 3)
      ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs " << ref[i];
  EXPECT_EQ(bad, 0u) << what;
}

}  // namespace

TEST(LstmGolden, PackedSequenceMatchesPyTorch) {
  const auto f = golden();
  const Case k{3, 5, 4, 3, 1, {5, 1, 3}};
  auto s = build_objective(k);
  const Graph& g = s->g;
  // r as PyTorch's objective: per sample ry[n], rh[n], rc[n].
  const auto ry = read_as<double>(f, "op.ry"), rh = read_as<double>(f, "op.rh"), rc = read_as<double>(f, "op.rc");
  std::vector<float> r;
  for (int64_t n = 0; n < k.N; ++n) {
    for (int64_t i = 0; i < k.T * k.H; ++i) r.push_back(float(ry[size_t(n * k.T * k.H + i)]));
    for (int64_t i = 0; i < k.H; ++i) r.push_back(float(rh[size_t(n * k.H + i)]));
    for (int64_t i = 0; i < k.H; ++i) r.push_back(float(rc[size_t(n * k.H + i)]));
  }
  for (Backend be : {Backend::Reference64, Backend::Reference, Backend::Cpu}) {
    SCOPED_TRACE(backend_name(be));
    const double tol = be == Backend::Reference64 ? 1e-6 : 2e-5;
    ExecConfig cfg;
    cfg.backend = be;
    Executor ex(g, cfg);
    ex.init_params(1);
    for (const char* p : {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"}) {
      const auto w = to_f32(read_as<double>(f, std::string("op.") + p));
      ex.write_f32(g.find(std::string("lstm.") + p), w.data());
    }
    const auto x = to_f32(read_as<double>(f, "op.x"));
    ex.write_f32(s->x, x.data());
    ex.write_f32(s->r, r.data());
    const auto len = read_as<int32_t>(f, "op.lengths");
    ex.feed(s->len, len.data(), len.size() * 4);
    ex.run(kernels::StepContext{});
    auto read = [&](ValueId v) {
      std::vector<float> o(size_t(numel(g.value(v).shape)));
      ex.read_f32(v, o.data());
      return o;
    };
    expect_close(read(s->y), read_as<double>(f, "op.y"), tol, "y");
    expect_close(read(s->h), read_as<double>(f, "op.h"), tol, "h_n");
    expect_close(read(s->c), read_as<double>(f, "op.c"), tol, "c_n");
    expect_close(read(g.value(s->x).grad), read_as<double>(f, "op.dx"), tol, "dx");
    for (const char* p : {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"})
      expect_close(read(g.value(g.find(std::string("lstm.") + p)).grad), read_as<double>(f, std::string("op.d.") + p),
                   tol, p);
  }
}

TEST(LstmGolden, ClassifierStepMatchesPyTorch) {
  const auto f = golden();
  const auto tokens = read_as<int32_t>(f, "clf.tokens"), lengths = read_as<int32_t>(f, "clf.lengths"),
             labels = read_as<int32_t>(f, "clf.labels");
  const int64_t N = int64_t(labels.size()), T = int64_t(tokens.size()) / N;
  train::StepSpec spec;
  spec.model = "lstm-classifier";
  spec.batch = N;
  spec.classes = 3;
  spec.data = {{"tokens", DType::i32, {T}, 0.0, 11}, {"lengths", DType::i32, {}, 0.0, T + 1},
               {"labels", DType::i32, {}, -1.0, 3}};
  spec.optimizer.momentum = std::stod(f.metadata().at("momentum"));
  const auto sg = train::build_step_graph(spec);
  const Graph& g = sg->g;
  for (Backend be : {Backend::Reference64, Backend::Cpu}) {
    SCOPED_TRACE(backend_name(be));
    ExecConfig cfg;
    cfg.backend = be;
    Executor ex(g, cfg);
    ex.init_params(1);
    int loaded = 0;
    for (ValueId p : g.params()) {
      const auto w = read_as<float>(f, "clf.init." + g.value(p).name);
      ASSERT_EQ(w.size(), size_t(numel(g.value(p).shape))) << g.value(p).name;
      ex.write_f32(p, w.data());
      ++loaded;
    }
    EXPECT_EQ(loaded, 7);
    for (const auto& in : sg->inputs) {
      const auto& v = in.spec.name == "tokens" ? tokens : in.spec.name == "lengths" ? lengths : labels;
      ex.feed(in.value, v.data(), v.size() * 4);
    }
    kernels::StepContext ctx;
    ctx.lr = std::stod(f.metadata().at("lr"));
    const size_t n_nodes = g.num_nodes();
    ASSERT_EQ(g.node(NodeId(n_nodes - 1)).phase, Phase::Update);
    ex.run_nodes(0, n_nodes - 1, ctx);
    std::vector<float> logits(size_t(N * 3));
    ex.read_f32(sg->logits, logits.data());
    expect_close(logits, read_as<double>(f, "clf.logits"), 1e-4, "logits");
    const auto losses = read_as<double>(f, "clf.losses");
    EXPECT_NEAR(ex.fetch_scalar(sg->loss), losses[0], 1e-5 * losses[0]);
    for (ValueId p : g.trainable_params()) {
      const Value& val = g.value(p);
      const auto ref = read_as<double>(f, "clf.grad." + val.name);
      std::vector<float> gr(ref.size());
      ex.read_f32(val.grad, gr.data());
      double d = 0, rn = 0;
      for (size_t i = 0; i < ref.size(); ++i) d += (gr[i] - ref[i]) * (gr[i] - ref[i]), rn += ref[i] * ref[i];
      EXPECT_LE(std::sqrt(d), 1e-4 * std::sqrt(rn) + 1e-12) << val.name << " gradient differs";
    }
    ex.run_nodes(n_nodes - 1, n_nodes, ctx);
    for (size_t t = 1; t < losses.size(); ++t) {
      ctx.step = int64_t(t);
      ex.run(ctx);
      EXPECT_NEAR(ex.fetch_scalar(sg->loss), losses[t], 1e-4 * losses[t]) << "step " << t;
    }
  }
}

TEST(LstmModel, ResolvesByNameAndLengthsAreOptional) {
  const models::Model m = models::resolve("lstm-classifier");
  EXPECT_EQ(m.inputs.at(0).name, "tokens");
  train::StepSpec spec;
  spec.model = "lstm-classifier";
  spec.batch = 2;
  spec.classes = 4;
  spec.data = {{"tokens", DType::i32, {9}, 0.0, 50}, {"labels", DType::i32, {}, -1.0, 4}};
  const auto sg = train::build_step_graph(spec);
  EXPECT_EQ(sg->inputs.size(), 2u);
  EXPECT_NE(sg->g.find("embedding.weight"), kNone);
  EXPECT_EQ(sg->g.value(sg->g.find("embedding.weight")).shape, (Shape{50, 64}));
  EXPECT_EQ(sg->g.value(sg->g.find("lstm.weight_hh_l0")).shape, (Shape{128, 32}));
  EXPECT_EQ(sg->g.value(sg->g.find("fc.weight")).shape, (Shape{4, 32}));
}

// ---------------------------------------------------------------- bench ----

// Not a timed test: prints the fast kernels' fwd+bwd time of the classifier
// step (N 64, T 100, embed 64, hidden 32) for the report.
TEST(LstmBench, ClassifierStepTime) {
  train::StepSpec spec;
  spec.model = "lstm-classifier";
  spec.batch = 64;
  spec.classes = 4;
  spec.with_update = false;
  spec.data = {{"tokens", DType::i32, {100}, 0.0, 1000}, {"labels", DType::i32, {}, -1.0, 4}};
  const auto sg = train::build_step_graph(spec);
  ExecConfig cfg;
  cfg.backend = Backend::Cpu;
  Executor ex(sg->g, cfg);
  ex.init_params(1);
  std::vector<int32_t> tok(64 * 100), lab(64);
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t((i * 7919) % 1000);
  for (size_t i = 0; i < lab.size(); ++i) lab[i] = int32_t(i % 4);
  ex.feed(sg->inputs[0].value, tok.data(), tok.size() * 4);
  ex.feed(sg->inputs[1].value, lab.data(), lab.size() * 4);
  kernels::StepContext ctx;
  ex.run(ctx);
  const int reps = 10;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) ex.run(ctx);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
  std::printf("lstm-classifier N64 T100 E64 H32: fwd+bwd %.2f ms per step (Cpu)\n", ms);
  EXPECT_TRUE(std::isfinite(ex.fetch_scalar(sg->loss)));
}
