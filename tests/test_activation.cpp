// The pointwise activations (op "activation": sigmoid, tanh, silu, clip,
// hardsigmoid, hardswish, leaky_relu, elu, exp, sqrt) and their backward op: the op's
// checks of its attributes, every gradient rule against finite differences
// in double, and the fast CPU kernels against the reference kernels in
// double, f32 and bf16 storage (guard bytes and NaN-poisoned arenas, as
// test_norm_kernels.cpp).
//
// Tolerances, fixed and derived from how the kernels compute:
//  - f32: kF32 = 16 x 2^-24 of the sum of the |terms| of the formula (the
//    value itself for the logistic forms, whose exp argument -x or -2|x| is
//    exact in f32 and within 2 ulp through exp; |a x| + |b| for hardsigmoid
//    and |x| (|x|/6 + 1/2) for hardswish, whose sums cancel near the kinks;
//    s (1 + |x| s(-x)) for silu', which cancels near x = -1.28): a few
//    roundings of a handful of operations, each at most an ulp or two. A
//    wrong formula is off by a whole term.
//  - bf16: the oracle rounded to bf16 and 2^-7 of it on top (the two
//    roundings may fall either side of a boundary).
//  - inputs are kept 0.1 away from each kind's kinks, where both sides are
//    a valid (sub)gradient and the finite difference is meaningless.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "error_of.hpp"
#include "gradcheck.hpp"
#include "kernel_check.hpp"
#include "kernels/cpu/engine.hpp"
#include "memfit/builder.hpp"
#include "memfit/op_registry.hpp"
#include "ops/activation/cpu.hpp"
#include "ops/activation/ref.hpp"

using namespace memfit;
using namespace memfit::testing::kernel_check;

namespace {

constexpr double kF32 = 16.0 * 0x1p-24;

struct Kind {
  const char* name;
  Attrs attrs;  // the parameters beyond kind
  kernels::ActivationParams params;
  std::vector<double> kinks;
  bool positive = false;  // its domain is x > 0 (sqrt): inputs are |x| + 1/4
};

std::vector<Kind> kinds() {
  using kernels::ActKind;
  return {
      {"sigmoid", {}, {0, ActKind::Sigmoid}, {}},
      {"tanh", {}, {0, ActKind::Tanh}, {}},
      {"silu", {}, {0, ActKind::Silu}, {}},
      {"clip", {{"min", 0.0}, {"max", 6.0}}, {0, ActKind::Clip, 0.0, 6.0}, {0.0, 6.0}},
      {"clip", {{"min", -1.5}, {"max", 2.0}}, {0, ActKind::Clip, -1.5, 2.0}, {-1.5, 2.0}},
      {"hardsigmoid", {}, {0, ActKind::HardSigmoid, 1.0 / 6.0, 0.5}, {-3.0, 3.0}},
      {"hardsigmoid", {{"alpha", 0.2}, {"beta", 0.5}}, {0, ActKind::HardSigmoid, 0.2, 0.5}, {-2.5, 2.5}},
      {"hardswish", {}, {0, ActKind::HardSwish}, {-3.0, 3.0}},
      {"leaky_relu", {}, {0, ActKind::LeakyRelu, 0.01}, {0.0}},
      {"leaky_relu", {{"alpha", 0.2}}, {0, ActKind::LeakyRelu, 0.2}, {0.0}},
      {"elu", {}, {0, ActKind::Elu, 1.0}, {0.0}},
      {"elu", {{"alpha", 0.5}}, {0, ActKind::Elu, 0.5}, {0.0}},
      {"exp", {}, {0, ActKind::Exp}, {}},
      {"sqrt", {}, {0, ActKind::Sqrt}, {}, true},
  };
}

Attrs attrs_of(const Kind& k) {
  Attrs a = k.attrs;
  a.set("kind", std::string(k.name));
  return a;
}

std::string label(const Kind& k) {
  std::ostringstream s;
  s << k.name;
  if (k.params.a != 0.0 || k.params.b != 0.0) s << "(" << k.params.a << ", " << k.params.b << ")";
  return s.str();
}

// x moved 0.1 past any kink it is within 0.05 of (and into the kind's
// domain).
double off_kinks(double x, const Kind& k) {
  if (k.positive) return std::abs(x) + 0.25;
  for (double c : k.kinks)
    if (std::abs(x - c) < 0.05) return c + 0.1;
  return x;
}

double sig(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// The sum of the |terms| of f(x) and of f'(x) (see the top of the file).
double value_terms(const kernels::ActivationParams& p, double x) {
  using kernels::ActKind;
  switch (p.kind) {
    case ActKind::HardSigmoid: return std::abs(p.a * x) + std::abs(p.b);
    case ActKind::HardSwish: return std::abs(x) * (std::abs(x) / 6.0 + 0.5);
    default: return std::abs(kernels::ref::act_detail::value(p, x));
  }
}
double derivative_terms(const kernels::ActivationParams& p, double x) {
  using kernels::ActKind;
  switch (p.kind) {
    case ActKind::Silu: return sig(x) * (1.0 + std::abs(x) * sig(-x));
    case ActKind::HardSwish: return x < -3.0 ? 0.0 : x <= 3.0 ? std::abs(x) / 3.0 + 0.5 : 1.0;
    default: return std::abs(kernels::ref::act_detail::derivative(p, x));
  }
}

std::string message_of(const std::function<void()>& f) {
  return memfit::testing::error_of<GraphError>(f, "(no GraphError)");
}

}  // namespace

// ------------------------------------------------------------------ the op ----

TEST(ActivationOp, RefusesUnknownKindsAndMissingOrBadParameters) {
  Graph g;
  ValueId x = g.input("x", {4, 5});
  const std::string unknown = message_of([&] { g.add1("activation", {x}, {{"kind", std::string("swish")}}, "act"); });
  EXPECT_NE(unknown.find("unknown activation kind \"swish\""), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("hardswish"), std::string::npos) << "the known kinds are listed: " << unknown;
  EXPECT_NE(unknown.find("layer 'act'"), std::string::npos) << unknown;
  const std::string no_kind = message_of([&] { g.add1("activation", {x}, {}, "act"); });
  EXPECT_NE(no_kind.find("needs attr kind"), std::string::npos) << no_kind;
  const std::string no_max = message_of([&] { g.add1("activation", {x}, {{"kind", std::string("clip")}, {"min", 0.0}}, "act"); });
  EXPECT_NE(no_max.find("clip needs attrs min and max"), std::string::npos) << no_max;
  const std::string crossed = message_of(
      [&] { g.add1("activation", {x}, {{"kind", std::string("clip")}, {"min", 1.0}, {"max", 0.0}}, "act"); });
  EXPECT_NE(crossed.find("min <= max"), std::string::npos) << crossed;
  ValueId ids = g.input("ids", {4}, DType::i32);
  const std::string ints = message_of([&] { g.add1("activation", {ids}, {{"kind", std::string("tanh")}}, "act"); });
  EXPECT_NE(ints.find("needs a float input"), std::string::npos) << ints;
  ValueId dy = g.input("dy", {4, 6});
  const std::string shape = message_of(
      [&] { g.add1("activation_bwd", {x, dy}, {{"kind", std::string("tanh")}}, "act", Phase::Backward); });
  EXPECT_NE(shape.find("dy must have x's shape"), std::string::npos) << shape;
}

TEST(ActivationOp, KeepsShapeAndTypeAndItsBackwardReadsTheInput) {
  Graph g;
  Builder b(g, true);
  ValueId x = g.input("x", {2, 3, 5});
  ValueId y = activation(b, x, "clip", {{"min", 0.0}, {"max", 6.0}});
  EXPECT_EQ(g.value(y).shape, (Shape{2, 3, 5}));
  EXPECT_EQ(g.value(y).dtype, DType::f32);
  const OpDef& def = op_def("activation");
  EXPECT_EQ(def.traits.inplace_input, 0);
  EXPECT_FALSE(def.traits.no_gradient);
  EXPECT_EQ(op_def("activation_bwd").traits.inplace_input, 1);
}

// --------------------------------------------------------------- gradients ----

TEST(GradCheckActivation, EveryKindRanks2To4) {
  for (const Kind& k : kinds()) {
    for (Shape s : {Shape{4, 7}, Shape{2, 3, 5}, Shape{2, 2, 3, 3}}) {
      SCOPED_TRACE(label(k) + " " + shape_str(s));
      std::vector<float> r = memfit::testing::random_floats(static_cast<size_t>(numel(s)), 11, -5.0f, 5.0f);
      std::vector<double> v;
      for (float f : r) v.push_back(off_kinks(f, k));
      const Attrs a = k.attrs;
      const std::string kind = k.name;
      memfit::testing::grad_check({{s, DType::f32, true, v}},
                                  [&](Builder& b, const std::vector<ValueId>& in) { return activation(b, in[0], kind, a); });
    }
  }
}

TEST(GradCheckActivation, ComposesWithALinearLayer) {
  // linear -> hardswish -> linear -> sigmoid: the parameters' gradients
  // pass through both rules.
  memfit::testing::grad_check({{Shape{3, 6}}}, [](Builder& b, const std::vector<ValueId>& in) {
    ValueId h = linear(b, in[0], 8, {.name = "fc1"});
    h = activation(b, h, "hardswish");
    h = linear(b, h, 4, {.name = "fc2"});
    return activation(b, h, "sigmoid");
  });
}

// ----------------------------------------------------------- fast kernels ----

static void check_kernels(bool bf16) {
  if (bf16 && !kernels::cpu::bf16_kernels_available()) {
    EXPECT_EQ(kernels::cpu::make_activation({16}, kernels::ElemType::BF16), nullptr);
    GTEST_SKIP() << "no bf16 vector loops in this build (no AVX-512): bf16 nodes run as f32 kernels between "
                    "conversions";
  }
  for (const Kind& k : kinds()) {
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(17), int64_t(768 * 3), int64_t(100003)}) {
      SCOPED_TRACE(label(k) + " n=" + std::to_string(n) + " " + tname(bf16));
      const size_t un = static_cast<size_t>(n);
      Graph g;
      ValueId x = g.input("x", {n}, storage(bf16)), dy = g.input("dy", {n}, storage(bf16));
      ValueId y = g.add1("activation", {x}, attrs_of(k), "act");
      ValueId dx = g.add1("activation_bwd", {x, dy}, attrs_of(k), "act", Phase::Backward);
      g.value(y).is_output = g.value(dx).is_output = true;
      std::vector<float> xs = uniform(un, 41, -9.0f, 9.0f, bf16);
      for (float& v : xs) v = static_cast<float>(off_kinks(v, k));
      if (bf16)
        for (float& v : xs) v = kernels::round_bf16(v);
      Feed f{{x, xs}, {dy, uniform(un, 42, -1.0f, 1.0f, bf16)}};
      const Result cpu = run(g, Backend::Cpu, f, {y, dx});
      EXPECT_EQ(cpu.kernels[0], bf16 ? "cpu.activation.bf16" : "cpu.activation");
      EXPECT_EQ(cpu.kernels[1], bf16 ? "cpu.activation_bwd.bf16" : "cpu.activation_bwd");
      kernels::ActivationParams p = k.params;
      p.n = n;
      std::vector<double> xd = dbl(f[x]), dyd = dbl(f[dy]), yd(un), dxd(un);
      oracle<kernels::ref::Activation>(p, {&xd}, {&yd});
      oracle<kernels::ref::ActivationBwd>(p, {&xd, &dyd}, {&dxd});
      const double rel = bf16 ? kRel : 0.0;
      expect_close("y", cpu.out.at(y), stored(yd, bf16),
                   [&](size_t i) { return kF32 * value_terms(p, xd[i]) + rel * std::abs(yd[i]) + kTiny; });
      expect_close("dx", cpu.out.at(dx), stored(dxd, bf16), [&](size_t i) {
        return kF32 * std::abs(dyd[i]) * derivative_terms(p, xd[i]) + rel * std::abs(dxd[i]) + kTiny;
      });
    }
  }
  print_worst();
}

TEST(ActivationKernels, MatchTheReferenceF32) { check_kernels(false); }
TEST(ActivationKernels, MatchTheReferenceBf16) { check_kernels(true); }

// activation `kind` of xs and its backward with dy = dys, on `be`: {y, dx}.
std::pair<std::vector<float>, std::vector<float>> run_kind(Backend be, const std::string& kind,
                                                           const std::vector<float>& xs, float dys) {
  const int64_t n = static_cast<int64_t>(xs.size());
  Graph g;
  ValueId x = g.input("x", {n}), dy = g.input("dy", {n});
  const Attrs a{{"kind", kind}};
  ValueId y = g.add1("activation", {x}, a, "act");
  ValueId dx = g.add1("activation_bwd", {x, dy}, a, "act", Phase::Backward);
  g.value(y).is_output = g.value(dx).is_output = true;
  Feed f{{x, xs}, {dy, std::vector<float>(xs.size(), dys)}};
  const Result r = run(g, be, f, {y, dx});
  return {r.out.at(y), r.out.at(dx)};
}

TEST(ActivationKernels, LogisticFormsStayFiniteAndExactInTheTails) {
  // Far into the tails 1 - s and 1 - tanh^2 would round to 0 or cancel; the
  // kernels' forms keep sigmoid' and tanh' positive and finite, and tanh
  // near 0 keeps its relative accuracy (expm1, not exp - 1).
  const std::vector<float> xs = {-100.0f, -30.0f, -1e-6f, 1e-6f, 30.0f, 100.0f, 1e-3f, -2e-4f};
  for (const char* kind : {"sigmoid", "tanh"}) {
    SCOPED_TRACE(kind);
    const auto [yv, dv] = run_kind(Backend::Cpu, kind, xs, 1.0f);
    for (size_t i = 0; i < xs.size(); ++i) {
      const double want = std::string(kind) == "tanh" ? std::tanh(double(xs[i])) : sig(xs[i]);
      EXPECT_TRUE(std::isfinite(dv[i])) << xs[i];
      EXPECT_GE(dv[i], 0.0f) << xs[i];
      if (std::abs(want) > 1e-30) {
        EXPECT_NEAR(yv[i] / want, 1.0, 1e-6) << "x = " << xs[i];
      }
    }
  }
}

TEST(ActivationKernels, SqrtAtZeroPassesNoGradientAndExpSaturatesAsF32) {
  // sqrt: 0 at 0 with derivative 0 (an L2 norm of a zero vector passes no
  // gradient, as PyTorch's), NaN below 0 with derivative 0; exp: +inf past
  // f32's range, 0 far below it, and its derivative the same. Reference
  // and fast kernel alike.
  const std::vector<float> xs = {0.0f, -1.0f, 4.0f, 1e-30f};
  const std::vector<float> es = {-200.0f, 0.0f, 1.0f, 100.0f};
  for (Backend be : {Backend::Reference, Backend::Cpu}) {
    for (const char* kind : {"sqrt", "exp"}) {
      SCOPED_TRACE(std::string(kind) + (be == Backend::Cpu ? " cpu" : " reference"));
      const bool sq = std::string(kind) == "sqrt";
      const auto [yv, dv] = run_kind(be, kind, sq ? xs : es, 2.0f);
      if (sq) {
        EXPECT_EQ(yv[0], 0.0f);
        EXPECT_EQ(dv[0], 0.0f);
        EXPECT_TRUE(std::isnan(yv[1]));
        EXPECT_EQ(dv[1], 0.0f);
        EXPECT_EQ(yv[2], 2.0f);
        EXPECT_EQ(dv[2], 0.5f);  // 2 x 1 / (2 sqrt 4)
        EXPECT_NEAR(yv[3], 1e-15f, 1e-21f);
      } else {
        EXPECT_EQ(yv[0], 0.0f);
        EXPECT_EQ(dv[0], 0.0f);
        EXPECT_EQ(yv[1], 1.0f);
        EXPECT_EQ(dv[1], 2.0f);
        EXPECT_NEAR(yv[2], std::exp(1.0), 2e-7);
        EXPECT_TRUE(std::isinf(yv[3]) && yv[3] > 0);
        EXPECT_TRUE(std::isinf(dv[3]) && dv[3] > 0);
      }
    }
  }
}
