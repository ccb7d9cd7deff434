// The element-wise binary ops with numpy broadcasting (op "binary": add,
// sub, mul, div) and their backward op: shape inference and its refusals,
// the collapsed index walk, every gradient against finite differences in
// double for broadcasts along leading, inner and trailing axes, and the
// fast CPU kernels against the reference kernels in double (guard bytes and
// NaN-poisoned arenas, as test_norm_kernels.cpp).
//
// Tolerances, fixed: forward 2^-23 of |y| (one f32 rounding of the
// operation, the operands exact in both); an element-wise gradient 2^-22 of
// |dx| (at most two roundings: div's -dy a / b^2 has three, 2^-21); a
// summed gradient 1e-6 of the sum of |terms| (each term rounded in f32 up to
// three times, then summed in double in both).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "error_of.hpp"
#include "gradcheck.hpp"
#include "kernel_check.hpp"
#include "memfit/builder.hpp"
#include "ops/binary/cpu.hpp"
#include "ops/binary/ref.hpp"

using namespace memfit;
using namespace memfit::testing::kernel_check;

namespace {

struct Case {
  Shape a, b;
};

// Broadcasts along leading, inner and trailing axes, either operand, and
// squeeze-and-excitation's [N, C, 1, 1] over [N, C, H, W].
std::vector<Case> cases() {
  return {{{2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {4}},       {{4}, {2, 3, 4}},        {{2, 3, 4}, {3, 1}},
          {{2, 1, 4}, {2, 3, 1}}, {{5, 6, 3, 3}, {5, 6, 1, 1}}, {{1, 6, 1, 1}, {5, 6, 3, 3}}, {{3, 1}, {1, 7}},
          {{2, 3}, {1}}};
}

std::string message_of(const std::function<void()>& f) {
  return memfit::testing::error_of<GraphError>(f, "(no GraphError)");
}

kernels::BinaryKind kind_of(const std::string& k) {
  using kernels::BinaryKind;
  return k == "add" ? BinaryKind::Add : k == "sub" ? BinaryKind::Sub : k == "mul" ? BinaryKind::Mul : BinaryKind::Div;
}

}  // namespace

TEST(BinaryOp, BroadcastShapesAndRefusals) {
  Graph g;
  Builder b(g, true);
  ValueId x = g.input("x", {5, 6, 3, 3}), s = g.input("s", {5, 6, 1, 1}), v = g.input("v", {3});
  EXPECT_EQ(g.value(binary(b, x, s, "mul")).shape, (Shape{5, 6, 3, 3}));
  EXPECT_EQ(g.value(binary(b, v, s, "add")).shape, (Shape{5, 6, 1, 3}));
  ValueId w = g.input("w", {5, 4, 3, 3});
  const std::string bad = message_of([&] { g.add1("binary", {x, w}, {{"kind", std::string("mul")}}, "se"); });
  EXPECT_NE(bad.find("shapes [5, 6, 3, 3] and [5, 4, 3, 3] do not broadcast (axis 1: 6 and 4)"), std::string::npos) << bad;
  EXPECT_NE(bad.find("layer 'se'"), std::string::npos) << bad;
  const std::string kind = message_of([&] { g.add1("binary", {x, s}, {{"kind", std::string("pow")}}, "se"); });
  EXPECT_NE(kind.find("unknown binary kind \"pow\""), std::string::npos) << kind;
  ValueId ids = g.input("ids", {3}, DType::i32);
  const std::string ints = message_of([&] { g.add1("binary", {v, ids}, {{"kind", std::string("add")}}, "se"); });
  EXPECT_NE(ints.find("two inputs of one float type"), std::string::npos) << ints;
}

TEST(BinaryOp, IndexWalkCollapsesAxesThatBroadcastAlike) {
  using kernels::make_binary_params;
  // [5, 6, 3, 3] x [5, 6, 1, 1]: two axes, b broadcast along the second.
  auto p = make_binary_params(kernels::BinaryKind::Mul, {5, 6, 3, 3}, {5, 6, 1, 1});
  EXPECT_EQ(p.dims, (std::vector<int64_t>{30, 9}));
  EXPECT_EQ(p.a_strides, (std::vector<int64_t>{9, 1}));
  EXPECT_EQ(p.b_strides, (std::vector<int64_t>{1, 0}));
  // [2, 1, 4] x [2, 3, 1]: three axes, each broadcast differently.
  p = make_binary_params(kernels::BinaryKind::Add, {2, 1, 4}, {2, 3, 1});
  EXPECT_EQ(p.dims, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(p.a_strides, (std::vector<int64_t>{4, 0, 1}));
  EXPECT_EQ(p.b_strides, (std::vector<int64_t>{3, 1, 0}));
}

TEST(GradCheckBinary, EveryKindAndBroadcast) {
  for (const char* kind : {"add", "sub", "mul", "div"})
    for (const Case& c : cases()) {
      SCOPED_TRACE(std::string(kind) + " " + shape_str(c.a) + " " + shape_str(c.b));
      std::vector<double> bv;
      for (float f : memfit::testing::random_floats(static_cast<size_t>(numel(c.b)), 5, 0.5f, 2.0f))
        bv.push_back(f);  // away from 0: div's derivative
      const std::string k = kind;
      memfit::testing::grad_check({{c.a}, {c.b, DType::f32, true, bv}},
                                  [&](Builder& b, const std::vector<ValueId>& in) { return binary(b, in[0], in[1], k); });
    }
}

static void check_kernels(const std::string& kind) {
  std::vector<Case> cs = cases();
  cs.push_back({{8, 64, 28, 28}, {8, 64, 1, 1}});  // threaded rows and sums
  cs.push_back({{256, 1000}, {1000}});
  for (const Case& c : cs) {
    SCOPED_TRACE(kind + " " + shape_str(c.a) + " " + shape_str(c.b));
    Graph g;
    ValueId a = g.input("a", c.a), b = g.input("b", c.b);
    ValueId y = g.add1("binary", {a, b}, {{"kind", kind}}, "op");
    const Shape ys = g.value(y).shape;
    ValueId dy = g.input("dy", ys);
    ValueId da = g.add1("binary_bwd", {a, b, dy}, {{"kind", kind}, {"wrt", int64_t(0)}}, "op", Phase::Backward);
    ValueId db = g.add1("binary_bwd", {a, b, dy}, {{"kind", kind}, {"wrt", int64_t(1)}}, "op", Phase::Backward);
    g.value(y).is_output = g.value(da).is_output = g.value(db).is_output = true;
    std::vector<float> bv = uniform(static_cast<size_t>(numel(c.b)), 52, 0.5f, 2.0f, false);
    Feed f{{a, uniform(static_cast<size_t>(numel(c.a)), 51, -2.0f, 2.0f, false)}, {b, bv},
           {dy, uniform(static_cast<size_t>(numel(ys)), 53, -1.0f, 1.0f, false)}};
    const Result cpu = run(g, Backend::Cpu, f, {y, da, db});
    EXPECT_EQ(cpu.kernels[0], "cpu.binary");
    EXPECT_EQ(cpu.kernels[1], "cpu.binary_bwd");
    std::vector<double> ad = dbl(f[a]), bd = dbl(f[b]), dyd = dbl(f[dy]), yd(static_cast<size_t>(numel(ys))),
                        dad(ad.size()), dbd(bd.size());
    auto p = kernels::make_binary_params(kind_of(kind), c.a, c.b);
    oracle<kernels::ref::Binary>(p, {&ad, &bd}, {&yd});
    expect_close("y", cpu.out.at(y), yd, [&](size_t i) { return 0x1p-23 * std::abs(yd[i]) + kTiny; });
    for (int w = 0; w < 2; ++w) {
      p.wrt = w;
      std::vector<double>& want = w == 0 ? dad : dbd;
      oracle<kernels::ref::BinaryBwd>(p, {&ad, &bd, &dyd}, {&want});
      // The sum of |terms| per element of the gradient.
      std::vector<double> terms(want.size(), 0.0);
      const auto ysr = kernels::binary_detail::y_strides(p);
      for (size_t j = 0; j < want.size(); ++j)
        kernels::binary_detail::for_each_summed(p, ysr, static_cast<int64_t>(j), [&](int64_t yi, int64_t ia, int64_t ib) {
          terms[j] += std::abs(dyd[static_cast<size_t>(yi)] *
                               kernels::binary_detail::derivative(p.kind, w, ad[static_cast<size_t>(ia)], bd[static_cast<size_t>(ib)]));
        });
      const bool summed = kernels::binary_detail::grad_numel(p) < numel(ys);
      expect_close(w == 0 ? "da" : "db", cpu.out.at(w == 0 ? da : db), want, [&](size_t j) {
        return (summed ? 1e-6 : (kind == "div" ? 0x1p-21 : 0x1p-22)) * terms[j] + kTiny;
      });
    }
  }
  print_worst();
}

TEST(BinaryKernels, AddMatchesTheReference) { check_kernels("add"); }
TEST(BinaryKernels, SubMatchesTheReference) { check_kernels("sub"); }
TEST(BinaryKernels, MulMatchesTheReference) { check_kernels("mul"); }
TEST(BinaryKernels, DivMatchesTheReference) { check_kernels("div"); }
