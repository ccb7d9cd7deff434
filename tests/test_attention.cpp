// The fused attention op (ops/attention/op.cpp, ops/attention/params.hpp):
//  - shapes, traits, flops, bad inputs, the builder (evaluation drops nothing);
//  - gradient checks in double (tests/gradcheck.hpp) with causal, a key mask
//    with a fully padded batch row, dropout (fixed counters: seed 42, step 0),
//    H = 1 and T != S;
//  - the fast CPU kernels against the double reference on odd shapes (T not
//    a multiple of the 64-row block, D = 1, 17, 64, Dv != D, fully padded
//    rows, dropout), the same bits on every run and on one thread as on all;
//  - PyTorch (tests/golden/attention.safetensors, make_attention_golden.py,
//    float64) on the double reference and the fast f32 kernels;
//  - the plan of a training graph at T = 1024: no buffer near B H T T floats;
//  - a printed fwd + bwd time at GPT-2-small shapes (not asserted).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "error_of.hpp"
#include "f64_fixture.hpp"
#include "gradcheck.hpp"
#include "graph_run.hpp"
#include "io/safetensors.hpp"
#include "memfit/autodiff.hpp"
#include "memfit/builder.hpp"
#include "memfit/op_registry.hpp"
#include "memfit/runtime.hpp"
#include "ops/attention/cpu.hpp"
#include "ops/attention/ref.hpp"

using namespace memfit;
using memfit::testing::grad_check;
using memfit::testing::GradInput;
using kernels::AttentionParams;

namespace {

std::string message_of(const std::function<void()>& f) { return memfit::testing::error_of<GraphError>(f, "(no GraphError)"); }

}  // namespace

// ------------------------------------------------------------- graph ----

TEST(Attention, ShapesTraitsFlops) {
  Graph g;
  Builder b(g);
  ValueId q = g.input("q", {2, 3, 5, 8}), k = g.input("k", {2, 3, 7, 8}), v = g.input("v", {2, 3, 7, 6});
  ValueId m = g.input("m", {2, 7}, DType::i32);
  ValueId o = attention(b, q, k, v, {.causal = true, .mask = m});
  EXPECT_EQ(g.value(o).shape, (Shape{2, 3, 5, 6}));
  const Node& n = g.node(g.value(o).producer);
  ASSERT_EQ(n.outputs.size(), 2u);
  EXPECT_EQ(g.value(n.outputs[1]).shape, (Shape{2, 3, 5}));
  EXPECT_EQ(g.value(n.outputs[1]).dtype, DType::f32);
  EXPECT_DOUBLE_EQ(n.attrs.f("scale"), 1.0 / std::sqrt(8.0));
  EXPECT_TRUE(op_def("attention").traits.heavy);
  EXPECT_TRUE(op_def("attention_bwd").traits.no_gradient);
  // 2 products of T S (D + Dv) multiply-adds, x2, halved under causal, + 10 per score for exp.
  const double rows = 2.0 * 3 * 5 * 7;
  EXPECT_DOUBLE_EQ(op_def("attention").flops(g, n), 0.5 * (2.0 * rows * 14 + 10.0 * rows));

  auto bad = [&](Shape qs, Shape ks, Shape vs, Shape ms, DType mt) {
    return message_of([&] {
      Graph h;
      Builder hb(h);
      std::vector<ValueId> in{h.input("q", qs), h.input("k", ks), h.input("v", vs)};
      if (!ms.empty()) in.push_back(h.input("m", ms, mt));
      h.add_node("attention", in, {{"scale", 1.0}}, "att0");
    });
  };
  for (const std::string& msg : {bad({2, 3, 5, 8}, {2, 3, 7, 9}, {2, 3, 7, 6}, {}, DType::i32),
                                 bad({2, 3, 5, 8}, {2, 3, 7, 8}, {2, 3, 6, 6}, {}, DType::i32),
                                 bad({2, 3, 5, 8}, {2, 3, 7, 8}, {2, 3, 7, 6}, {2, 6}, DType::i32),
                                 bad({2, 3, 5, 8}, {2, 3, 7, 8}, {2, 3, 7, 6}, {2, 7}, DType::f32),
                                 bad({2, 5, 8}, {2, 7, 8}, {2, 7, 6}, {}, DType::i32)}) {
    EXPECT_NE(msg.find("att0"), std::string::npos) << msg;
  }
  EXPECT_NE(message_of([&] {
              Graph h;
              h.add_node("attention", {h.input("q", {1, 1, 2, 2}), h.input("k", {1, 1, 2, 2}), h.input("v", {1, 1, 2, 2})},
                         {{"dropout", 1.0}}, "attd");
            }).find("dropout"),
            std::string::npos);
}

TEST(Attention, LayoutShapes) {
  Graph g;
  Builder b(g);
  ValueId q = g.input("q", {2, 5, 3, 8}), k = g.input("k", {2, 7, 3, 8}), v = g.input("v", {2, 7, 3, 6});
  EXPECT_EQ(g.value(attention(b, q, k, v, {.layout = "bthd"})).shape, (Shape{2, 5, 3, 6}));
  ValueId qkv = g.input("qkv", {2, 5, 3, 4, 8});
  const ValueId o = attention_packed(b, qkv, {.causal = true});
  EXPECT_EQ(g.value(o).shape, (Shape{2, 5, 4, 8}));
  const Node& n = g.node(g.value(o).producer);
  EXPECT_EQ(g.value(n.outputs[1]).shape, (Shape{2, 4, 5}));
  EXPECT_DOUBLE_EQ(n.attrs.f("scale"), 1.0 / std::sqrt(8.0));
  // One qkv of T = 5 queries and keys: 2 products of T T (D + D), halved.
  const double rows = 2.0 * 4 * 5 * 5;
  EXPECT_DOUBLE_EQ(op_def("attention").flops(g, n), 0.5 * (2.0 * rows * 16 + 10.0 * rows));
  auto fails = [&](std::vector<Shape> shapes, const std::string& layout) {
    return message_of([&] {
      Graph h;
      std::vector<ValueId> in;
      const char* names[] = {"a", "b", "c", "d"};
      for (const Shape& s : shapes) in.push_back(h.input(names[in.size()], s));
      h.add_node("attention", in, {{"layout", layout}}, "attl");
    });
  };
  EXPECT_NE(fails({{2, 5, 2, 4, 8}}, "packed").find("[B, T, 3, H, D]"), std::string::npos);
  EXPECT_NE(fails({{2, 5, 3, 8}, {2, 7, 4, 8}, {2, 7, 3, 6}}, "bthd").find("attl"), std::string::npos);
  EXPECT_NE(fails({{2, 5, 3, 8}, {2, 7, 3, 8}, {2, 7, 3, 6}}, "hbtd").find("layout"), std::string::npos);
  EXPECT_NE(fails({{2, 5, 3, 4, 8}, {2, 5, 3, 4, 8}}, "packed").find("mask"), std::string::npos);
}

TEST(Attention, EvaluationGraphDropsNothing) {
  for (bool training : {true, false}) {
    Graph g;
    Builder b(g, training);
    ValueId q = g.input("q", {1, 1, 4, 4});
    ValueId o = attention(b, q, q, q, {.dropout = 0.25});
    EXPECT_DOUBLE_EQ(g.node(g.value(o).producer).attrs.f("dropout"), training ? 0.25 : 0.0);
  }
}

TEST(Attention, LseCarriesNoGradient) {
  Graph g;
  Builder b(g);
  ValueId q = g.param("q", {1, 1, 2, 2});
  ValueId o = attention(b, q, q, q);
  ValueId lse = g.node(g.value(o).producer).outputs[1];
  ValueId loss = reshape(b, lse, {2});
  loss = reshape(b, g.add1("linear", {reshape(b, loss, {1, 2}), g.param("r", {1, 2}, false)}, {}, "obj"), {1});
  EXPECT_THROW(build_backward(g, loss, {q}), GraphError);
}

// ------------------------------------------------------- gradient check ----

namespace {

struct GradCase {
  int64_t B, H, T, S, D, Dv;
  bool causal = false;
  double dropout = 0.0;
  std::vector<double> mask = {};  // [B, S] 0/1; empty: no mask
  double scale = 0.0;
};

void check_grads(const GradCase& c) {
  std::vector<GradInput> ins{{.shape = {c.B, c.H, c.T, c.D}}, {.shape = {c.B, c.H, c.S, c.D}},
                             {.shape = {c.B, c.H, c.S, c.Dv}}};
  if (!c.mask.empty())
    ins.push_back({.shape = {c.B, c.S}, .dtype = DType::i32, .differentiable = false, .values = c.mask});
  grad_check(ins, [&](Builder& b, const std::vector<ValueId>& in) {
    AttentionOpts o{.causal = c.causal, .dropout = c.dropout, .scale = c.scale};
    if (in.size() > 3) o.mask = in[3];
    return attention(b, in[0], in[1], in[2], o);
  });
}

}  // namespace

TEST(AttentionGrad, Plain) { check_grads({2, 2, 3, 5, 4, 3}); }
TEST(AttentionGrad, SingleHeadScale) { check_grads({.B = 1, .H = 1, .T = 6, .S = 4, .D = 5, .Dv = 2, .scale = 0.9}); }
TEST(AttentionGrad, CausalSquare) { check_grads({.B = 1, .H = 2, .T = 5, .S = 5, .D = 3, .Dv = 4, .causal = true}); }
TEST(AttentionGrad, CausalMoreKeys) { check_grads({.B = 2, .H = 1, .T = 3, .S = 6, .D = 4, .Dv = 4, .causal = true}); }
// Batch 1's keys are all padded: its rows attend nothing (out 0, gradients 0).
// Under causal, batch 0's query 0 sees only key 0, which is padded: a fully
// masked row inside an otherwise attended batch.
TEST(AttentionGrad, MaskWithPaddedRows) {
  check_grads({.B = 2, .H = 2, .T = 4, .S = 4, .D = 3, .Dv = 3, .causal = true, .mask = {0, 1, 1, 0, 0, 0, 0, 0}});
  check_grads({.B = 2, .H = 1, .T = 3, .S = 5, .D = 2, .Dv = 3, .mask = {1, 0, 1, 1, 0, 0, 0, 0, 0, 0}});
}
TEST(AttentionGrad, Dropout) {
  check_grads({.B = 2, .H = 2, .T = 4, .S = 6, .D = 3, .Dv = 2, .dropout = 0.3});
  check_grads({.B = 1, .H = 2, .T = 5, .S = 5, .D = 4, .Dv = 3, .causal = true, .dropout = 0.5, .mask = {1, 1, 0, 1, 1}});
}

// The bthd layout (q [B, T, H, D] ...) and the packed one (qkv [B, T, 3, H,
// D]) through the same double gradient check: the kernels address rows
// differently, and the packed backward writes dq, dk, dv into one tensor.
TEST(AttentionGrad, HeadsInRowsLayout) {
  const int64_t B = 2, H = 2, T = 3, S = 5, D = 4, Dv = 3;
  grad_check({{.shape = {B, T, H, D}}, {.shape = {B, S, H, D}}, {.shape = {B, S, H, Dv}},
              {.shape = {B, S}, .dtype = DType::i32, .differentiable = false, .values = {1, 1, 0, 1, 1, 0, 1, 1, 1, 0}}},
             [](Builder& b, const std::vector<ValueId>& in) {
               return attention(b, in[0], in[1], in[2], {.dropout = 0.3, .mask = in[3], .layout = "bthd"});
             });
}
TEST(AttentionGrad, PackedQkv) {
  for (bool causal : {false, true})
    grad_check({{.shape = {2, 4, 3, 2, 3}}, {.shape = {2, 4}, .dtype = DType::i32, .differentiable = false,
                                              .values = {1, 1, 1, 0, 0, 0, 0, 0}}},
               [causal](Builder& b, const std::vector<ValueId>& in) {
                 return attention_packed(b, in[0], {.causal = causal, .dropout = 0.2, .mask = in[1]});
               });
}

// ------------------------------------------- kernels: fast vs reference ----

namespace {

struct Inputs {
  std::vector<float> q, k, v, dout;
  std::vector<int32_t> mask;
};

Inputs make_inputs(const AttentionParams& p, uint64_t seed, const std::vector<int32_t>& mask = {}) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> U(-1.0f, 1.0f);
  auto fill = [&](int64_t n) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& e : x) e = U(gen);
    return x;
  };
  return {fill(p.B * p.H * p.T * p.D), fill(p.B * p.H * p.S * p.D), fill(p.B * p.H * p.S * p.Dv),
          fill(p.B * p.H * p.T * p.Dv), mask};
}

template <class T>
struct Result {
  std::vector<T> out, lse, dq, dk, dv;
};

template <class T>
std::vector<T> as(const std::vector<float>& x) {
  return std::vector<T>(x.begin(), x.end());
}

// Runs fwd then bwd on x (converted to T); outputs start as NaN.
template <class T>
Result<T> run(kernels::Kernel& fwd, kernels::Kernel& bwd, const AttentionParams& p, const Inputs& x,
              kernels::StepContext ctx = {}) {
  const T nan = std::numeric_limits<T>::quiet_NaN();
  std::vector<T> q = as<T>(x.q), k = as<T>(x.k), v = as<T>(x.v), dout = as<T>(x.dout);
  std::vector<int32_t> mask = x.mask;
  Result<T> r;
  r.out.assign(static_cast<size_t>(p.B * p.H * p.T * p.Dv), nan);
  r.lse.assign(static_cast<size_t>(p.B * p.H * p.T), nan);
  r.dq.assign(q.size(), nan);
  r.dk.assign(k.size(), nan);
  r.dv.assign(v.size(), nan);
  std::vector<double> s1(fwd.scratch_bytes() / 8 + 8), s2(bwd.scratch_bytes() / 8 + 8);
  std::vector<void*> fin{q.data(), k.data(), v.data()};
  if (p.mask) fin.push_back(mask.data());
  fwd.bind(fin, {r.out.data(), r.lse.data()}, s1.data());
  fwd.run(ctx);
  std::vector<void*> bin{q.data(), k.data(), v.data(), r.out.data(), r.lse.data(), dout.data()};
  if (p.mask) bin.push_back(mask.data());
  bwd.bind(bin, {r.dq.data(), r.dk.data(), r.dv.data()}, s2.data());
  bwd.run(ctx);
  return r;
}

Result<double> run_ref(const AttentionParams& p, const Inputs& x, kernels::StepContext ctx = {}) {
  kernels::ref::Attention<double> f(p);
  kernels::ref::AttentionBwd<double> b(p);
  return run<double>(f, b, p, x, ctx);
}
Result<float> run_fast(const AttentionParams& p, const Inputs& x, kernels::StepContext ctx = {}) {
  auto f = kernels::cpu::make_attention(p);
  auto b = kernels::cpu::make_attention_bwd(p);
  return run<float>(*f, *b, p, x, ctx);
}

// max |got - want| <= tol (max |want| + 1), every element finite where want is.
template <class T>
void expect_close(const std::vector<float>& got, const std::vector<T>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double mx = 0, err = 0;
  size_t at = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double w = static_cast<double>(want[i]), g = got[i];
    if (std::isinf(w)) {  // lse of a row with no key
      ASSERT_EQ(g, w) << what << "[" << i << "]";
      continue;
    }
    ASSERT_TRUE(std::isfinite(g)) << what << "[" << i << "] = " << g << " (unwritten or overflow)";
    mx = std::max(mx, std::abs(w));
    if (std::abs(g - w) > err) err = std::abs(g - w), at = i;
  }
  EXPECT_LE(err, tol * (mx + 1.0)) << what << ": worst at " << at << " got " << got[at] << " want " << want[at];
}

// Tolerances of the f32 fast kernels against the double reference, relative
// to the largest magnitude of the tensor (+1, for tensors near 0). Inputs are
// uniform in [-1, 1], so |scores| <= scale D = sqrt(D) and |out| <= 1. The
// fast kernels round each dot product of D <= 64 terms (error <= D 2^-24 of
// sum |terms| in the worst case, ~sqrt(D) 2^-24 typically), exp to 2 ulp, the
// softmax sums over S <= 300 keys in f32 (<= 64 2^-24 in a lane, then a
// 16-lane sum per block of 64 keys and one product per block of 64), the
// output sums likewise: a few 1e-6 relative. kFwd = 2e-5 covers that with
// margin; a wrong or missing term (1/S of the row) is >= 3e-3.
// The gradients add two more products and the cancellation in dS = P (dP -
// delta) (|dP|, |delta| <= Dv while dS is smaller): kBwd = 1e-4 of the
// largest gradient, still far below one wrong term.
constexpr double kFwd = 2e-5, kBwd = 1e-4;

void expect_fast_matches(const AttentionParams& p, const Inputs& x, kernels::StepContext ctx = {}) {
  const Result<double> want = run_ref(p, x, ctx);
  const Result<float> got = run_fast(p, x, ctx);
  expect_close(got.out, want.out, kFwd, "out");
  expect_close(got.lse, want.lse, kFwd, "lse");
  expect_close(got.dq, want.dq, kBwd, "dq");
  expect_close(got.dk, want.dk, kBwd, "dk");
  expect_close(got.dv, want.dv, kBwd, "dv");
}

AttentionParams params(int64_t B, int64_t H, int64_t T, int64_t S, int64_t D, int64_t Dv, bool causal = false) {
  AttentionParams p{B, H, T, S, D, Dv};
  p.scale = 1.0 / std::sqrt(static_cast<double>(D));
  p.causal = causal;
  p.stream = 12345;
  return p;
}

}  // namespace

TEST(AttentionKernels, FastMatchesReferenceOddShapes) {
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    expect_fast_matches(params(1, 2, 70, 70, 64, 64, causal), make_inputs(params(1, 2, 70, 70, 64, 64), 1));
    expect_fast_matches(params(2, 3, 33, 100, 1, 1, causal), make_inputs(params(2, 3, 33, 100, 1, 1), 2));
    expect_fast_matches(params(1, 2, 129, 65, 17, 5, causal), make_inputs(params(1, 2, 129, 65, 17, 5), 3));
    expect_fast_matches(params(1, 1, 5, 300, 7, 80, causal), make_inputs(params(1, 1, 5, 300, 7, 80), 4));
    // Large enough for the thread team.
    expect_fast_matches(params(2, 4, 200, 200, 64, 64, causal), make_inputs(params(2, 4, 200, 200, 64, 64), 5));
  }
}

TEST(AttentionKernels, MaskAndFullyPaddedRows) {
  // Batch 0: scattered padding, keys 64.. padded (a whole key block of
  // -inf); batch 1: every key padded (rows attend nothing: out 0, lse -inf,
  // no gradient). Causal adds rows whose only visible key is padded.
  for (bool causal : {false, true}) {
    AttentionParams p = params(2, 2, 67, 130, 17, 9, causal);
    p.mask = true;
    std::vector<int32_t> mask(2 * 130, 0);
    for (int j = 0; j < 64; ++j) mask[static_cast<size_t>(j)] = j % 3 != 0 ? 1 : 0;
    for (int j = 128; j < 130; ++j) mask[static_cast<size_t>(j)] = 1;
    const Inputs x = make_inputs(p, 11, mask);
    expect_fast_matches(p, x);
    const Result<float> r = run_fast(p, x);
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 67; ++i) {
        const size_t row = static_cast<size_t>((2 + h) * 67 + i);  // batch 1
        EXPECT_EQ(r.lse[row], -std::numeric_limits<float>::infinity());
        for (int64_t c = 0; c < 9; ++c) EXPECT_EQ(r.out[row * 9 + static_cast<size_t>(c)], 0.0f);
        for (int64_t c = 0; c < 17; ++c) EXPECT_EQ(r.dq[row * 17 + static_cast<size_t>(c)], 0.0f);
      }
    for (size_t e = 2 * 130 * 17; e < r.dk.size(); ++e) ASSERT_EQ(r.dk[e], 0.0f);
  }
}

TEST(AttentionKernels, DropoutMatchesReferenceAndReplays) {
  for (bool causal : {false, true}) {
    AttentionParams p = params(2, 3, 70, 90, 16, 16, causal);
    p.dropout = 0.2;
    const Inputs x = make_inputs(p, 21);
    kernels::StepContext ctx;
    ctx.seed = 9;
    ctx.step = 3;
    ctx.micro = 1;
    ctx.row0 = 1;
    expect_fast_matches(p, x, ctx);
    // Another step draws another mask.
    kernels::StepContext ctx2 = ctx;
    ctx2.step = 4;
    EXPECT_NE(run_fast(p, x, ctx).out, run_fast(p, x, ctx2).out);
  }
  // A micro-batch whose first row in the global batch is row0 draws rows
  // row0.. of the whole batch's mask: the second half of a B = 2 batch equals
  // a B = 1 micro-batch at row 1.
  AttentionParams big = params(2, 2, 9, 11, 4, 4), small = params(1, 2, 9, 11, 4, 4);
  big.dropout = small.dropout = 0.4;
  const Inputs x = make_inputs(big, 5);
  Inputs half = x;
  auto second = [](const std::vector<float>& a) { return std::vector<float>(a.begin() + a.size() / 2, a.end()); };
  half.q = second(x.q), half.k = second(x.k), half.v = second(x.v), half.dout = second(x.dout);
  kernels::StepContext c1;
  c1.row0 = 1;
  EXPECT_EQ(second(run_fast(big, x).out), run_fast(small, half, c1).out);
}

TEST(AttentionKernels, SameBitsEveryRunAndThreadCount) {
  const AttentionParams p = params(2, 4, 200, 200, 64, 64, true);
  const Inputs x = make_inputs(p, 31);
  const Result<float> a = run_fast(p, x), b = run_fast(p, x);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const Result<float> c = run_fast(p, x);
  omp_set_num_threads(saved);
  for (const Result<float>* r : {&b, &c}) {
    EXPECT_EQ(a.out, r->out);
    EXPECT_EQ(a.lse, r->lse);
    EXPECT_EQ(a.dq, r->dq);
    EXPECT_EQ(a.dk, r->dk);
    EXPECT_EQ(a.dv, r->dv);
  }
}

namespace {

// x [B, H, N, W] (bhtd) -> [B, N, H, W] (bthd).
std::vector<float> heads_in_rows(const std::vector<float>& x, int64_t B, int64_t H, int64_t N, int64_t W) {
  std::vector<float> y(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t w = 0; w < W; ++w)
          y[static_cast<size_t>(((b * N + n) * H + h) * W + w)] = x[static_cast<size_t>(((b * H + h) * N + n) * W + w)];
  return y;
}

// Part `part` of qkv [B, T, 3, H, D] as [B, T, H, D] (bthd).
std::vector<float> part_of(const std::vector<float>& qkv, int64_t B, int64_t T, int64_t H, int64_t D, int64_t part) {
  std::vector<float> y(static_cast<size_t>(B * T * H * D));
  for (int64_t bt = 0; bt < B * T; ++bt)
    for (int64_t e = 0; e < H * D; ++e)
      y[static_cast<size_t>(bt * H * D + e)] = qkv[static_cast<size_t>((bt * 3 + part) * H * D + e)];
  return y;
}

}  // namespace

// Every layout runs the same arithmetic in the same order: the bthd and
// packed kernels (fast and reference) give the bhtd results bit for bit,
// permuted, with a mask, causal, dropout and T not a multiple of the block.
TEST(AttentionKernels, LayoutsGiveTheSameBits) {
  const int64_t B = 2, H = 3, T = 70, D = 16;
  AttentionParams p = params(B, H, T, T, D, D, true);
  p.dropout = 0.1;
  p.mask = true;
  std::vector<int32_t> mask(static_cast<size_t>(B * T), 1);
  for (int64_t j = 0; j < T; j += 3) mask[static_cast<size_t>(T + j)] = 0;
  const Inputs x = make_inputs(p, 41, mask);
  kernels::StepContext ctx;
  ctx.seed = 5;
  ctx.step = 2;
  const Result<float> want = run_fast(p, x, ctx);
  const Result<double> want_ref = run_ref(p, x, ctx);
  auto rows = [&](const std::vector<float>& t) { return heads_in_rows(t, B, H, T, D); };
  auto rows_d = [&](const std::vector<double>& t) {
    return heads_in_rows(std::vector<float>(t.begin(), t.end()), B, H, T, D);
  };

  // bthd: q, k, v, dout permuted; the results come back permuted.
  AttentionParams pr = p;
  pr.layout = kernels::AttentionLayout::BTHD;
  const Inputs xr{rows(x.q), rows(x.k), rows(x.v), rows(x.dout), mask};
  const Result<float> got = run_fast(pr, xr, ctx);
  EXPECT_EQ(got.out, rows(want.out));
  EXPECT_EQ(got.lse, want.lse);
  EXPECT_EQ(got.dq, rows(want.dq));
  EXPECT_EQ(got.dk, rows(want.dk));
  EXPECT_EQ(got.dv, rows(want.dv));
  const Result<double> got_ref = run_ref(pr, xr, ctx);
  EXPECT_EQ(std::vector<float>(got_ref.out.begin(), got_ref.out.end()), rows_d(want_ref.out));
  EXPECT_EQ(std::vector<float>(got_ref.dk.begin(), got_ref.dk.end()), rows_d(want_ref.dk));

  // packed: one qkv input, one dqkv output.
  AttentionParams pp = p;
  pp.layout = kernels::AttentionLayout::Packed;
  std::vector<float> qkv(static_cast<size_t>(B * T * 3 * H * D));
  for (int64_t part = 0; part < 3; ++part) {
    const std::vector<float> src = rows(part == 0 ? x.q : part == 1 ? x.k : x.v);
    for (int64_t bt = 0; bt < B * T; ++bt)
      for (int64_t e = 0; e < H * D; ++e)
        qkv[static_cast<size_t>((bt * 3 + part) * H * D + e)] = src[static_cast<size_t>(bt * H * D + e)];
  }
  std::vector<float> dout = rows(x.dout), out(static_cast<size_t>(B * T * H * D), NAN),
                     lse(static_cast<size_t>(B * H * T), NAN), dqkv(qkv.size(), NAN);
  auto f = kernels::cpu::make_attention(pp);
  auto bk = kernels::cpu::make_attention_bwd(pp);
  std::vector<double> s1(f->scratch_bytes() / 8 + 8), s2(bk->scratch_bytes() / 8 + 8);
  f->bind({qkv.data(), mask.data()}, {out.data(), lse.data()}, s1.data());
  f->run(ctx);
  bk->bind({qkv.data(), out.data(), lse.data(), dout.data(), mask.data()}, {dqkv.data()}, s2.data());
  bk->run(ctx);
  EXPECT_EQ(out, rows(want.out));
  EXPECT_EQ(lse, want.lse);
  EXPECT_EQ(part_of(dqkv, B, T, H, D, 0), rows(want.dq));
  EXPECT_EQ(part_of(dqkv, B, T, H, D, 1), rows(want.dk));
  EXPECT_EQ(part_of(dqkv, B, T, H, D, 2), rows(want.dv));
}

// ------------------------------------------------------------- PyTorch ----

namespace {

struct Golden : memfit::testing::F64Fixture {
  Golden() : F64Fixture(open("attention.safetensors")) {}
};

template <class T>
void expect_golden(const std::vector<T>& got, const std::vector<double>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(static_cast<double>(got[i]), want[i], tol * (1.0 + std::abs(want[i]))) << what << "[" << i << "]";
}

}  // namespace

// The reference in double agrees with PyTorch's float64 to rounding (1e-12
// relative: sums of <= 33 terms of magnitude <= 20); the fast f32 kernels to
// kFwd / kBwd relative per element, as above (|q|, |k| <= 1.5 here, so
// |scores| <= 2.25 sqrt(D)).
TEST(AttentionGolden, MatchesPyTorch) {
  const Golden gf;
  for (const std::string c : {"causal_mask", "cross", "square"}) {
    SCOPED_TRACE(c);
    Shape qs, ks, vs;
    const auto q = gf.get(c + ".q", &qs), k = gf.get(c + ".k", &ks), v = gf.get(c + ".v", &vs);
    const auto dout = gf.get(c + ".dout"), mask = gf.get(c + ".mask");
    AttentionParams p{qs[0], qs[1], qs[2], ks[2], qs[3], vs[3]};
    p.causal = gf.f.metadata().at(c + ".causal") == "1";
    p.scale = std::stod(gf.f.metadata().at(c + ".scale"));
    p.mask = true;
    Inputs x{std::vector<float>(q.begin(), q.end()), std::vector<float>(k.begin(), k.end()),
             std::vector<float>(v.begin(), v.end()), std::vector<float>(dout.begin(), dout.end()),
             std::vector<int32_t>(mask.begin(), mask.end())};
    const Result<double> r = run_ref(p, x);
    const Result<float> f = run_fast(p, x);
    const char* names[] = {"out", "lse", "dq", "dk", "dv"};
    const std::vector<double>* rv[] = {&r.out, &r.lse, &r.dq, &r.dk, &r.dv};
    const std::vector<float>* fv[] = {&f.out, &f.lse, &f.dq, &f.dk, &f.dv};
    for (int t = 0; t < 5; ++t) {
      const auto want = gf.get(c + "." + names[t]);
      expect_golden(*rv[t], want, 1e-12, std::string("ref ") + names[t]);
      expect_golden(*fv[t], want, t < 2 ? kFwd : kBwd, std::string("fast ") + names[t]);
    }
  }
}

// ------------------------------------------------------- bf16 storage ----

// bf16 q, k, v, out, dout (lse stays f32): the CPU backend runs the f32 fast
// kernel between conversions, the reference backend the f32 reference
// kernel between conversions; both see the same bf16 values. The backward
// is fed the same out and lse on both sides (random out, lse = log S + 1:
// the formulas need not describe a real forward to be compared). Each bf16
// output is the f32 result rounded once: the two may round to neighbours,
// 2^-7 |want|, on top of the f32 bounds above.
TEST(AttentionBf16, CpuMatchesReferenceBetweenConversions) {
  const int64_t B = 2, H = 2, T = 70, S = 45, D = 16, Dv = 12;
  Graph g;
  Builder b(g);
  const DType h = DType::bf16;
  ValueId q = g.input("q", {B, H, T, D}, h), k = g.input("k", {B, H, S, D}, h), v = g.input("v", {B, H, S, Dv}, h);
  ValueId m = g.input("m", {B, S}, DType::i32);
  ValueId o_in = g.input("o", {B, H, T, Dv}, h), l_in = g.input("l", {B, H, T}), dout = g.input("dout", {B, H, T, Dv}, h);
  ValueId o = attention(b, q, k, v, {.causal = true, .mask = m});
  const ValueId lse = g.node(g.value(o).producer).outputs[1];
  auto grads = g.add_node("attention_bwd", {q, k, v, o_in, l_in, dout, m},
                          g.node(g.value(o).producer).attrs, "attn_bwd", Phase::Backward);
  std::vector<ValueId> read{o, lse, grads[0], grads[1], grads[2]};
  for (ValueId r : read) g.value(r).is_output = true;
  memfit::testing::GraphData data;
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> U(-1.0f, 1.0f);
  for (ValueId x : {q, k, v, o_in, dout}) {
    auto& d = data.floats[x];
    for (int64_t i = 0; i < numel(g.value(x).shape); ++i) d.push_back(kernels::bf16_to_f32(kernels::f32_to_bf16(U(gen))));
  }
  data.floats[l_in].assign(static_cast<size_t>(B * H * T), std::log(static_cast<float>(S)) + 1.0f);
  auto& mk = data.ints[m];
  for (int64_t j = 0; j < B * S; ++j) mk.push_back(j % 5 == 0 ? 0 : 1);
  const memfit::testing::Values want = memfit::testing::run_graph(g, Backend::Reference, data, read);
  const memfit::testing::Values got = memfit::testing::run_graph(g, Backend::Cpu, data, read);
  const char* names[] = {"out", "lse", "dq", "dk", "dv"};
  for (size_t t = 0; t < read.size(); ++t) {
    const auto &w = want.at(read[t]), &gv = got.at(read[t]);
    double mx = 0;
    for (float e : w) mx = std::max(mx, std::abs(static_cast<double>(e)));
    const double tol = (t < 2 ? kFwd : kBwd) * (mx + 1.0);
    for (size_t i = 0; i < w.size(); ++i) {
      if (std::isinf(w[i])) {
        ASSERT_EQ(gv[i], w[i]) << names[t] << "[" << i << "]";
        continue;
      }
      ASSERT_NEAR(gv[i], w[i], tol + (t == 1 ? 0.0 : std::ldexp(std::abs(w[i]), -7))) << names[t] << "[" << i << "]";
    }
  }
}

// ---------------------------------------------------------------- plan ----

// A training graph through causal attention at T = 1024: the planner must
// place nothing near the B H T T probabilities (8 MiB here); q, k, v and
// their gradients are 128 KiB each, the kernels' scratch a few tiles per
// thread. Also runs one step on the CPU backend: every gradient finite.
TEST(AttentionPlan, NoTimesTMatrixAtT1024) {
  const int64_t B = 1, H = 2, T = 1024, D = 16;
  Graph g;
  Builder b(g);
  ValueId x = g.input("x", {B, H, T, D});
  ValueId wq = g.param("wq", {B, H, T, D}), wk = g.param("wk", {B, H, T, D}), wv = g.param("wv", {B, H, T, D});
  ValueId q = add(b, x, wq), k = add(b, x, wk), v = add(b, x, wv);
  ValueId o = attention(b, q, k, v, {.causal = true, .dropout = 0.1});
  const int64_t n = numel(g.value(o).shape);
  ValueId r = g.param("objective.r", {1, n}, false);
  ValueId loss = reshape(b, g.add1("linear", {reshape(b, o, {1, n}), r}, {}, "objective"), {1});
  g.value(loss).is_output = true;
  BackwardResult bw = build_backward(g, loss, {wq, wk, wv});
  ExecConfig cfg;
  cfg.verify = true;
  Executor ex(g, cfg);
  const Plan& plan = ex.plan();
  const size_t txt = static_cast<size_t>(B * H * T * T) * sizeof(float);
  size_t largest = 0;
  for (const auto& pl : plan.values) largest = std::max(largest, pl.bytes);
  for (const auto& s : plan.scratch) largest = std::max(largest, s.bytes);
  std::printf("attention T=1024: largest planned buffer %zu bytes, transient arena %zu bytes, B*H*T*T*4 = %zu\n",
              largest, plan.arena_bytes[static_cast<size_t>(Arena::Transient)], txt);
  EXPECT_LE(largest, txt / 16);
  EXPECT_LT(plan.arena_bytes[static_cast<size_t>(Arena::Transient)], txt / 4);
  for (size_t n = 0; n < g.num_nodes(); ++n) {  // the fast kernels, not the reference fallback
    const std::string& op = g.node(static_cast<NodeId>(n)).op;
    if (op == "attention" || op == "attention_bwd") {
      EXPECT_EQ(std::string(ex.kernel_name(n)), "cpu." + op);
    }
  }
  ex.init_params(3);
  std::vector<float> xv(static_cast<size_t>(numel(g.value(x).shape)));
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.01f * static_cast<float>(i));
  ex.write_f32(x, xv.data());
  ex.run(kernels::StepContext{});
  for (ValueId w : {wq, wk, wv}) {
    std::vector<float> gv(static_cast<size_t>(numel(g.value(w).shape)));
    ex.read_f32(bw.grads.at(w), gv.data());
    for (float e : gv) ASSERT_TRUE(std::isfinite(e));
  }
}
