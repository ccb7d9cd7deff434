// The Transformer ops over the last axis, at the graph level: layer_norm,
// gelu (exact and tanh) and softmax with their backward ops.
//  - shape inference: bad shapes and attributes fail naming the layer;
//    builder parameter names; declared traits;
//  - gradient checks in double (tests/gradcheck.hpp: finite differences,
//    NaN-poisoned gradient buffers) for ranks 2, 3 and 4 with last axes that
//    are not multiples of 16;
//  - golden values from the formulas at hand-computed points, on the double
//    reference and the fast f32 kernels;
//  - PyTorch: tests/golden/norm_ops.safetensors (tests/golden/
//    make_norm_golden.py, torch 1.13 in float64) for the forward values and
//    the gradients autodiff derives, on the double reference and the fast
//    f32 kernels.
// Fast kernels against the reference kernels, bf16 and in-place runs:
// tests/test_norm_kernels.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "error_of.hpp"
#include "f64_fixture.hpp"
#include "gradcheck.hpp"
#include "norm_tolerance.hpp"
#include "io/safetensors.hpp"
#include "memfit/autodiff.hpp"
#include "memfit/builder.hpp"
#include "memfit/op_registry.hpp"
#include "memfit/runtime.hpp"

using namespace memfit;
using memfit::testing::grad_check;
using memfit::testing::GradInput;

namespace {

using Ins = std::vector<ValueId>;

GradInput f32(Shape s) { return {.shape = std::move(s)}; }

// Values evenly spread over [lo, hi] in a scrambled order (GELU's curved part).
GradInput spread(Shape s, double lo, double hi) {
  GradInput g{.shape = std::move(s)};
  const int64_t n = numel(g.shape);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = (i * 7919) % n;  // 7919 is prime: a permutation when n is not a multiple
    g.values.push_back(lo + (hi - lo) * (static_cast<double>(k) + 0.5) / static_cast<double>(n));
  }
  return g;
}

ValueId ln_node(Builder& b, const Ins& in, double eps) {
  return b.g.add_node("layer_norm", in, {{"eps", eps}}, "ln")[0];
}

std::string message_of(const std::function<void()>& f) { return memfit::testing::error_of<GraphError>(f, "(no GraphError)"); }

void expect_mentions(const std::string& m, std::initializer_list<const char*> parts) {
  for (const char* p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' missing from: " << m;
}

}  // namespace

// ------------------------------------------------------ shape inference ----

TEST(NormOps, ShapesAndTypes) {
  Graph g;
  Builder b(g);
  ValueId x = g.input("x", {2, 3, 17});
  auto ln = g.add_node("layer_norm", {x, g.param("w", {17}), g.param("b", {17})}, {}, "ln");
  ASSERT_EQ(ln.size(), 3u);
  EXPECT_EQ(g.value(ln[0]).shape, (Shape{2, 3, 17}));
  EXPECT_EQ(g.value(ln[1]).shape, (Shape{6}));
  EXPECT_EQ(g.value(ln[2]).shape, (Shape{6}));
  EXPECT_EQ(g.value(ln[1]).dtype, DType::f32);
  ValueId xb = g.input("xb", {4, 5}, DType::bf16);
  EXPECT_EQ(g.value(gelu(b, xb, true)).dtype, DType::bf16);
  EXPECT_EQ(g.value(softmax(b, xb)).dtype, DType::bf16);
  auto lnb = g.add_node("layer_norm", {xb, g.param("w5", {5}), g.param("b5", {5})}, {}, "lnb");
  EXPECT_EQ(g.value(lnb[0]).dtype, DType::bf16);
  EXPECT_EQ(g.value(lnb[2]).dtype, DType::f32);  // statistics stay f32
}

TEST(NormOps, BadShapesNameTheLayer) {
  Graph g;
  Builder b(g);
  ValueId x = g.input("x", {2, 3, 8});
  expect_mentions(message_of([&] { g.add_node("layer_norm", {x, g.param("w", {7}), g.param("b", {8})}, {}, "enc.ln1"); }),
                  {"layer 'enc.ln1' (layer_norm)", "gamma", "[8]"});
  expect_mentions(message_of([&] { g.add_node("layer_norm", {x, g.param("w2", {8}), g.param("b2", {3})}, {}, "ln"); }),
                  {"(layer_norm)", "beta", "[8]"});
  expect_mentions(message_of([&] { g.add_node("layer_norm", {x}, {}, "ln"); }), {"takes x, gamma, beta"});
  expect_mentions(message_of([&] {
                    g.add_node("layer_norm", {x, g.param("w3", {8}), g.param("b3", {8})}, {{"eps", -1.0}}, "ln");
                  }),
                  {"eps"});
  expect_mentions(message_of([&] { g.add1("gelu", {x}, {{"approximate", std::string("erf")}}, "mlp.act"); }),
                  {"layer 'mlp.act' (gelu)", "\"none\" or \"tanh\"", "\"erf\""});
  ValueId ints = g.input("ids", {4, 3}, DType::i32);
  expect_mentions(message_of([&] { g.add1("softmax", {ints}, {}, "attn.softmax"); }),
                  {"layer 'attn.softmax' (softmax)", "float"});
  ValueId y = g.input("y", {2, 3, 7});
  expect_mentions(message_of([&] { g.add1("softmax_bwd", {x, y}, {}, "sm", Phase::Backward); }),
                  {"(softmax_bwd)", "dy must have y's shape"});
  expect_mentions(message_of([&] { g.add1("gelu_bwd", {x, y}, {}, "act", Phase::Backward); }),
                  {"(gelu_bwd)", "dy must have x's shape"});
  ValueId xb = g.input("xb", {2, 3, 8}, DType::bf16);
  expect_mentions(message_of([&] {
                    g.add_node("layer_norm_bwd", {x, xb, g.param("w4", {8}), g.input("m", {6}), g.input("r", {6})}, {},
                               "ln", Phase::Backward);
                  }),
                  {"(layer_norm_bwd)", "dy must have x's shape and type"});
  expect_mentions(message_of([&] { layer_norm(b, g.input("s", {}), {.name = "lnf"}); }), {"'lnf'", "layer_norm"});
}

TEST(NormOps, BuilderNamesParametersLikePyTorch) {
  Graph g;
  Builder b(g);
  ValueId x = g.input("x", {2, 5, 24});
  {
    auto sc = b.scope("h.0");
    x = layer_norm(b, x, {.eps = 1e-6, .name = "ln_1"});
  }
  const ValueId w = g.find("h.0.ln_1.weight"), bias = g.find("h.0.ln_1.bias");
  ASSERT_NE(w, kNone);
  ASSERT_NE(bias, kNone);
  EXPECT_EQ(g.value(w).shape, (Shape{24}));
  EXPECT_TRUE(g.value(w).trainable);
  EXPECT_EQ(g.value(w).init.kind, InitSpec::Ones);
  EXPECT_EQ(g.value(bias).init.kind, InitSpec::Zeros);
  const Node& n = g.node(g.value(x).producer);
  EXPECT_EQ(n.op, "layer_norm");
  EXPECT_EQ(n.layer, "h.0.ln_1");
  EXPECT_DOUBLE_EQ(n.attrs.f("eps"), 1e-6);
  EXPECT_EQ(g.node(g.value(gelu(b, x, true)).producer).attrs.s("approximate"), "tanh");
  EXPECT_EQ(g.node(g.value(gelu(b, x)).producer).attrs.s("approximate"), "none");
}

TEST(NormOps, Traits) {
  // Forward outputs may take over their input (the backward of layer_norm
  // and gelu read x, so the planner only does so where x dies there:
  // inference); every backward may write dx over dy.
  for (const char* op : {"layer_norm", "gelu", "softmax"}) {
    EXPECT_EQ(op_def(op).traits.inplace_input, 0) << op;
    EXPECT_FALSE(op_def(op).traits.no_gradient) << op;
    EXPECT_TRUE(static_cast<bool>(op_def(op).flops)) << op;
  }
  for (const char* op : {"layer_norm_bwd", "gelu_bwd", "softmax_bwd"}) {
    EXPECT_EQ(op_def(op).traits.inplace_input, 1) << op;
    EXPECT_TRUE(op_def(op).traits.no_gradient) << op;
    EXPECT_TRUE(static_cast<bool>(op_def(op).flops)) << op;
  }
  // The gradient rules read what the kernels need and no more: layer_norm's
  // backward its input and statistics (no normalised copy), softmax's its output.
  Graph g;
  Builder b(g);
  ValueId x = g.input("x", {4, 9});
  ValueId y = softmax(b, gelu(b, layer_norm(b, x), true));
  ValueId labels = g.input("labels", {4}, DType::i32);
  ValueId loss = softmax_xent(b, y, labels);
  build_backward(g, loss, {x});
  for (const Node& n : g.nodes()) {
    if (n.op == "softmax_bwd") {
      EXPECT_EQ(g.node(g.value(n.inputs[0]).producer).op, "softmax");
    }
    if (n.op == "gelu_bwd") {
      EXPECT_EQ(g.node(g.value(n.inputs[0]).producer).op, "layer_norm");
    }
    if (n.op == "layer_norm_bwd") {
      EXPECT_EQ(n.inputs[0], x);
      EXPECT_EQ(g.value(n.inputs[3]).producer, g.value(n.inputs[4]).producer);  // mean, rstd of the forward
    }
  }
}

// ------------------------------------------------------- gradient checks ----

TEST(GradCheckLayerNorm, Rank2BuilderParams) {
  grad_check({f32({3, 7})}, [](Builder& b, const Ins& in) { return layer_norm(b, in[0]); });
}

TEST(GradCheckLayerNorm, Rank3RandomAffine) {
  grad_check({f32({2, 3, 17}), f32({17}), f32({17})}, [](Builder& b, const Ins& in) { return ln_node(b, in, 1e-5); });
}

TEST(GradCheckLayerNorm, Rank4LargeEps) {
  grad_check({f32({2, 2, 3, 5}), f32({5}), f32({5})}, [](Builder& b, const Ins& in) { return ln_node(b, in, 0.1); });
}

TEST(GradCheckLayerNorm, OffsetInputLongRow) {
  // A mean far from zero and a row longer than one flush of the fast
  // kernels' f32 lanes (the reference runs here, but the formula is the same).
  GradInput x = spread({2, 37}, 4.0, 6.0);
  grad_check({x, f32({37}), f32({37})}, [](Builder& b, const Ins& in) { return ln_node(b, in, 1e-5); });
}

TEST(GradCheckLayerNorm, LastAxisOne) {
  // D = 1: y = beta whatever x is, so dx = 0 and dgamma = 0.
  grad_check({f32({5, 1}), f32({1}), f32({1})}, [](Builder& b, const Ins& in) { return ln_node(b, in, 1e-5); });
}

TEST(GradCheckGelu, ExactRanks2To4) {
  for (Shape s : {Shape{4, 7}, Shape{2, 3, 17}, Shape{2, 2, 3, 5}}) {
    SCOPED_TRACE(shape_str(s));
    grad_check({spread(s, -4.0, 4.0)}, [](Builder& b, const Ins& in) { return gelu(b, in[0], false); });
  }
}

TEST(GradCheckGelu, TanhRanks2To4) {
  for (Shape s : {Shape{4, 7}, Shape{2, 3, 17}, Shape{2, 2, 3, 5}}) {
    SCOPED_TRACE(shape_str(s));
    grad_check({spread(s, -4.0, 4.0)}, [](Builder& b, const Ins& in) { return gelu(b, in[0], true); });
  }
}

TEST(GradCheckSoftmax, Ranks2To4) {
  for (Shape s : {Shape{4, 7}, Shape{2, 3, 17}, Shape{2, 2, 3, 5}, Shape{3, 1}}) {
    SCOPED_TRACE(shape_str(s));
    grad_check({spread(s, -3.0, 3.0)}, [](Builder& b, const Ins& in) { return softmax(b, in[0]); });
  }
}

TEST(GradCheckNormOps, TransformerSubBlock) {
  // ln -> linear -> gelu -> linear, added back to the input, then an
  // attention-like softmax: every rule composes, parameters included.
  grad_check({f32({2, 3, 6})}, [](Builder& b, const Ins& in) {
    ValueId h = layer_norm(b, in[0], {.name = "ln_1"});
    h = linear(b, h, 10, {.name = "fc"});
    h = gelu(b, h, true);
    h = linear(b, h, 6, {.name = "proj"});
    h = add(b, h, in[0]);
    return softmax(b, layer_norm(b, h, {.name = "ln_2"}));
  });
}

// --------------------------------------------------------- golden values ----

namespace {

// Runs a one-op graph on `backend` with x (and, for layer_norm, gamma = 1 and
// beta = 0) and returns y.
std::vector<double> run_forward(Backend backend, const std::string& op, Shape s, const std::vector<double>& x,
                                Attrs attrs = {}) {
  Graph g;
  ValueId in = g.input("x", s);
  std::vector<ValueId> ins{in};
  if (op == "layer_norm") {
    ins.push_back(g.input("gamma", {s.back()}));
    ins.push_back(g.input("beta", {s.back()}));
  }
  ValueId y = g.add_node(op, ins, attrs, "op")[0];
  g.value(y).is_output = true;
  ExecConfig cfg;
  cfg.backend = backend;
  Executor ex(g, cfg);
  auto put = [&](ValueId v, const std::vector<double>& d) {
    std::vector<float> f(d.begin(), d.end());
    ex.write_f32(v, f.data());
  };
  put(in, x);
  if (op == "layer_norm") {
    put(ins[1], std::vector<double>(static_cast<size_t>(s.back()), 1.0));
    put(ins[2], std::vector<double>(static_cast<size_t>(s.back()), 0.0));
  }
  ex.run(kernels::StepContext{});
  std::vector<double> r(x.size());
  if (backend == Backend::Reference64) {
    const double* p = ex.ptr<double>(y);
    r.assign(p, p + x.size());
  } else {
    std::vector<float> f(x.size());
    ex.read_f32(y, f.data());
    r.assign(f.begin(), f.end());
  }
  return r;
}

// Reference64 within 1e-14 relative (double arithmetic, a few roundings)
// plus 1e-16 |x| (the textbook formulas below form 1 + erf and 1 + tanh,
// which lose up to 2^-53 absolutely where they are small, x << 0);
// Cpu (f32 arithmetic from f32-exact inputs) within f32_rel(x[i]) relative
// (gelu: tests/norm_tolerance.hpp; layer_norm, softmax: 1e-6, ~16 f32
// ulps for a few roundings of short rows), while a wrong formula or
// constant is off by far more.
void expect_golden(const std::string& what, const std::string& op, Shape s, const std::vector<double>& x,
                   const std::vector<double>& want, Attrs attrs = {},
                   const std::function<double(double)>& f32_rel = [](double) { return 1e-6; }) {
  for (Backend backend : {Backend::Reference64, Backend::Cpu}) {
    const std::vector<double> got = run_forward(backend, op, s, x, attrs);
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i],
                  backend == Backend::Cpu ? f32_rel(x[i]) * std::abs(want[i]) + 1e-300
                                          : 1e-14 * std::abs(want[i]) + 1e-16 * std::abs(x[i]))
          << what << " on " << backend_name(backend) << " at x[" << i << "] = " << x[i];
  }
}

}  // namespace

TEST(NormGolden, GeluExactAtKnownPoints) {
  const std::vector<double> x = {-5.0, -3.0, -1.0, -0.5, -0.125, 0.0, 0.25, 0.5, 1.0, 2.0, 3.0, 6.0};
  std::vector<double> want;
  for (double v : x) want.push_back(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))));
  // Two by hand: Phi(1) = 0.8413447460685429..., Phi(-1) = 1 - Phi(1).
  EXPECT_NEAR(want[8], 0.8413447460685429, 1e-15);
  EXPECT_NEAR(want[2], -0.15865525393145707, 1e-15);
  auto rel = [](double v) { return memfit::testing::gelu_f32_rel(v, false); };
  expect_golden("gelu exact", "gelu", {1, 12}, x, want, {{"approximate", std::string("none")}}, rel);
  expect_golden("gelu default", "gelu", {1, 12}, x, want, {}, rel);
}

TEST(NormGolden, GeluTanhAtKnownPoints) {
  const std::vector<double> x = {-5.0, -3.0, -1.0, -0.5, -0.125, 0.0, 0.25, 0.5, 1.0, 2.0, 3.0, 6.0};
  std::vector<double> want;
  const double c = std::sqrt(2.0 / M_PI);
  for (double v : x) want.push_back(0.5 * v * (1.0 + std::tanh(c * (v + 0.044715 * v * v * v))));
  EXPECT_NEAR(want[8], 0.8411919906082768, 1e-15);  // gelu_tanh(1), as PyTorch gives it
  expect_golden("gelu tanh", "gelu", {2, 6}, x, want, {{"approximate", std::string("tanh")}},
                [](double v) { return memfit::testing::gelu_f32_rel(v, true); });
}

TEST(NormGolden, LayerNormByHand) {
  // [1, 2, 3, 4]: mean 2.5, variance 1.25; with eps = 0, y = (x - 2.5) / sqrt(1.25).
  const double k = 1.0 / std::sqrt(1.25);
  expect_golden("layer_norm", "layer_norm", {2, 4}, {1, 2, 3, 4, -8, -8, -8, 8},
                {-1.5 * k, -0.5 * k, 0.5 * k, 1.5 * k, -1.0 / std::sqrt(3.0), -1.0 / std::sqrt(3.0),
                 -1.0 / std::sqrt(3.0), std::sqrt(3.0)},
                {{"eps", 0.0}});
}

TEST(NormGolden, SoftmaxByHandAndShiftInvariant) {
  const double s = 1.0 + std::exp(1.0) + std::exp(2.0);
  const std::vector<double> p = {1.0 / s, std::exp(1.0) / s, std::exp(2.0) / s};
  // Rows 2 and 3 shifted by +-1000: without the max subtracted exp overflows
  // (or every term underflows); the result must not change.
  expect_golden("softmax", "softmax", {4, 3}, {0, 1, 2, 1000, 1001, 1002, -1002, -1001, -1000, 5, 5, 5},
                {p[0], p[1], p[2], p[0], p[1], p[2], p[0], p[1], p[2], 1.0 / 3, 1.0 / 3, 1.0 / 3});
  EXPECT_NEAR(p[0], 0.09003057317038046, 1e-16);
}

// ---------------------------------------------------------------- PyTorch ----

namespace {

using Fixture = memfit::testing::F64Fixture;

Fixture fixture() { return Fixture::open("norm_ops.safetensors"); }

// What one case feeds and checks: graph inputs with their values, forward
// outputs by fixture name, and (by fixture name) the inputs whose gradient
// of sum(y * dy) is checked.
struct TorchCase {
  Graph g;
  std::vector<std::pair<ValueId, std::vector<double>>> feed;
  std::vector<std::pair<std::string, ValueId>> check;  // fixture name -> value
  std::vector<std::pair<std::string, ValueId>> grads;  // fixture name -> input whose gradient it is
  ValueId r = kNone;                                   // the objective's weight: dy
  std::vector<double> dy;
};

// Appends the objective sum(y * dy) as tests/gradcheck.hpp does (a linear
// layer with the frozen weight dy) and autodiff; the gradients join `check`.
void add_objective(TorchCase& c, ValueId y) {
  Graph& g = c.g;
  Builder b(g);
  const int64_t n = numel(g.value(y).shape);
  ValueId flat = reshape(b, y, {1, n});
  c.r = g.param("objective.r", {1, n}, /*trainable=*/false);
  ValueId loss = reshape(b, g.add1("linear", {flat, c.r}, {}, "objective"), {1});
  g.value(loss).is_output = true;
  g.value(y).is_output = true;
  std::vector<ValueId> wrt;
  for (auto& [name, v] : c.grads) wrt.push_back(v);
  BackwardResult bw = build_backward(g, loss, wrt);
  for (auto& [name, v] : c.grads) c.check.push_back({name, bw.grads.at(v)});
}

// Runs the case on `backend` and compares every checked value with the
// fixture: |got - want| <= tol(name, i, want).
void run_torch_case(TorchCase& c, const Fixture& fx, Backend backend,
                    const std::function<double(const std::string&, size_t, double)>& tol) {
  ExecConfig cfg;
  cfg.backend = backend;
  cfg.verify = true;
  Executor ex(c.g, cfg);
  ex.init_params(1);
  ex.poison(0xFF);
  auto put = [&](ValueId v, const std::vector<double>& d) {
    std::vector<float> f(d.begin(), d.end());
    for (size_t i = 0; i < d.size(); ++i) ASSERT_EQ(static_cast<double>(f[i]), d[i]) << "fixture input not f32-exact";
    ex.write_f32(v, f.data());
  };
  for (auto& [v, d] : c.feed) put(v, d);
  put(c.r, c.dy);
  ex.run(kernels::StepContext{});
  for (auto& [name, v] : c.check) {
    const std::vector<double> want = fx.get(name);
    ASSERT_EQ(static_cast<size_t>(numel(c.g.value(v).shape)), want.size()) << name;
    std::vector<double> got(want.size());
    if (backend == Backend::Reference64) {
      std::memcpy(got.data(), ex.ptr<double>(v), got.size() * sizeof(double));
    } else {
      std::vector<float> f(want.size());
      ex.read_f32(v, f.data());
      got.assign(f.begin(), f.end());
    }
    size_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const double t = tol(name, i, want[i]);
      if (!(std::abs(got[i] - want[i]) <= t) && ++bad <= 5)
        ADD_FAILURE() << name << "[" << i << "] on " << backend_name(backend) << ": got " << got[i] << " torch "
                      << want[i] << " tol " << t;
    }
    EXPECT_EQ(bad, 0u) << name << " on " << backend_name(backend);
  }
}

// Double reference against torch's float64: the same formulas but for the
// order of a few double roundings: within 1e-12 of the values' scale.
constexpr double kTorch64 = 1e-12;

}  // namespace

TEST(NormTorch, LayerNorm) {
  const Fixture fx = fixture();
  for (const char* name : {"ln3", "ln4"}) {
    SCOPED_TRACE(name);
    const std::string p = std::string(name) + ".";
    Shape xs;
    std::vector<double> x = fx.get(p + "x", &xs);
    const int64_t D = xs.back(), R = numel(xs) / D;
    const double eps = std::stod(fx.f.metadata().at(p + "eps"));
    // f32 tolerances (as in test_norm_kernels.cpp, there against the f32
    // reference; here against the truth, which adds one f32 rounding):
    // mean within 1e-5 mean|x|, rstd within 1e-5 rstd (f32 sums of <= 64
    // terms per lane: 64 2^-24 = 3.8e-6, plus roundings), y within 1e-5
    // ((|x - mean| + mean|x|) rstd |gamma| + |beta|); dx = rstd (g - mean g -
    // xhat mean(g xhat)) within 1e-5 rstd (|g| + mean|g| + |xhat| mean|g
    // xhat|), dgamma and dbeta within 1e-5 of sum|term| over the rows.
    const std::vector<double> w = fx.get(p + "weight"), bb = fx.get(p + "bias"), dy = fx.get(p + "dy"),
                              mean = fx.get(p + "mean"), rstd = fx.get(p + "rstd");
    std::vector<double> xabs(static_cast<size_t>(R), 0.0);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t j = 0; j < D; ++j) xabs[r] += std::abs(x[static_cast<size_t>(r * D + j)]) / D;
    std::vector<double> ty(x.size()), tdx(x.size()), tdg(static_cast<size_t>(D), 0.0), tdb(static_cast<size_t>(D), 0.0);
    for (int64_t r = 0; r < R; ++r) {
      double ag = 0, agx = 0;
      for (int64_t j = 0; j < D; ++j) {
        const size_t k = static_cast<size_t>(r * D + j);
        const double xhat = (x[k] - mean[r]) * rstd[r], g = dy[k] * w[j];
        ty[k] = (std::abs(x[k] - mean[r]) + xabs[r]) * rstd[r] * std::abs(w[j]) + std::abs(bb[j]);
        ag += std::abs(g) / D;
        agx += std::abs(g * xhat) / D;
        tdg[j] += std::abs(dy[k] * xhat);
        tdb[j] += std::abs(dy[k]);
      }
      for (int64_t j = 0; j < D; ++j) {
        const size_t k = static_cast<size_t>(r * D + j);
        tdx[k] = rstd[r] * (std::abs(dy[k] * w[j]) + ag + std::abs((x[k] - mean[r]) * rstd[r]) * agx);
      }
    }
    auto scale = [&](const std::string& n, size_t i) {
      if (n == p + "y") return ty[i];
      if (n == p + "dx") return tdx[i];
      if (n == p + "dweight") return tdg[i];
      if (n == p + "dbias") return tdb[i];
      if (n == p + "mean") return xabs[i];
      return rstd[i];  // rstd
    };
    for (Backend backend : {Backend::Reference64, Backend::Cpu}) {
      TorchCase c;
      ValueId xv = c.g.input("x", xs), wv = c.g.input("w", {D}), bv = c.g.input("b", {D});
      auto outs = c.g.add_node("layer_norm", {xv, wv, bv}, {{"eps", eps}}, "ln");
      c.g.value(outs[1]).is_output = c.g.value(outs[2]).is_output = true;
      c.feed = {{xv, x}, {wv, w}, {bv, bb}};
      c.dy = dy;
      c.check = {{p + "y", outs[0]}, {p + "mean", outs[1]}, {p + "rstd", outs[2]}};
      c.grads = {{p + "dx", xv}, {p + "dweight", wv}, {p + "dbias", bv}};
      add_objective(c, outs[0]);
      const double rel = backend == Backend::Cpu ? 1e-5 : kTorch64;
      run_torch_case(c, fx, backend, [&](const std::string& n, size_t i, double) { return rel * scale(n, i); });
    }
  }
}

TEST(NormTorch, Gelu) {
  const Fixture fx = fixture();
  Shape xs;
  const std::vector<double> x = fx.get("gelu.x", &xs), dy = fx.get("gelu.dy");
  for (const char* approx : {"none", "tanh"}) {
    SCOPED_TRACE(approx);
    const std::string p = std::string("gelu_") + approx + ".";
    for (Backend backend : {Backend::Reference64, Backend::Cpu}) {
      TorchCase c;
      ValueId xv = c.g.input("x", xs);
      Builder b(c.g);
      ValueId y = gelu(b, xv, std::string(approx) == "tanh");
      c.feed = {{xv, x}};
      c.dy = dy;
      c.check = {{p + "y", y}};
      c.grads = {{p + "dx", xv}};
      add_objective(c, y);
      // f32: y within tests/norm_tolerance.hpp's relative bound, dx = dy
      // gelu'(x) within that of |dy| times the sum of gelu's |terms| (gelu'
      // cancels near x = -0.75, so its error is relative to its terms). torch
      // forms 1 + erf and 1 + tanh, which lose up to 2^-53 absolutely where
      // they are small (x << 0): the double comparison allows 1e-15 (1 + |x|)
      // on top of kTorch64.
      const bool cpu = backend == Backend::Cpu, tanh = std::string(approx) == "tanh";
      const double floor = cpu ? 0.0 : 1e-15;
      run_torch_case(c, fx, backend, [&](const std::string& n, size_t i, double want) {
        const double v = x[i], rel = cpu ? memfit::testing::gelu_f32_rel(v, tanh) : kTorch64;
        if (n == p + "y") return rel * std::abs(want) + floor * (1.0 + std::abs(v)) + 1e-300;
        return std::abs(dy[i]) * (rel * memfit::testing::gelu_grad_terms(v, tanh) + floor * (1.0 + std::abs(v))) +
               1e-300;
      });
    }
  }
}

TEST(NormTorch, Softmax) {
  const Fixture fx = fixture();
  Shape xs;
  const std::vector<double> x = fx.get("softmax.x", &xs), dy = fx.get("softmax.dy"), y = fx.get("softmax.y");
  const int64_t D = xs.back(), R = numel(xs) / D;
  // f32: y within 1e-5 relative (exp's argument x - max is rounded: |x -
  // max| 2^-24 <= 1e-6 here, plus the f32 lane sums' 3.8e-6); dx = y (dy -
  // s) within 1e-5 y (|dy| + sum|dy y|).
  std::vector<double> sdy(static_cast<size_t>(R), 0.0);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < D; ++j) sdy[r] += std::abs(dy[static_cast<size_t>(r * D + j)] * y[static_cast<size_t>(r * D + j)]);
  for (Backend backend : {Backend::Reference64, Backend::Cpu}) {
    TorchCase c;
    ValueId xv = c.g.input("x", xs);
    Builder b(c.g);
    ValueId out = softmax(b, xv);
    c.feed = {{xv, x}};
    c.dy = dy;
    c.check = {{"softmax.y", out}};
    c.grads = {{"softmax.dx", xv}};
    add_objective(c, out);
    const double rel = backend == Backend::Cpu ? 1e-5 : kTorch64;
    run_torch_case(c, fx, backend, [&](const std::string& n, size_t i, double want) {
      if (n == "softmax.y") return rel * std::abs(want) + 1e-300;
      return rel * y[i] * (std::abs(dy[i]) + sdy[i / static_cast<size_t>(D)]) + 1e-300;
    });
  }
}
