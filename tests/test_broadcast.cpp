// add_broadcast (a bias or a position table added over leading axes),
// expand_leading (a class token repeated over the batch) and their
// gradient sum_leading: gradient checks in double, the fast CPU kernels
// against the reference, in place, and shape errors naming the layer.
//
// Tolerances: the add is exact in f32 (the same single rounding in both
// kernels); the sums accumulate in double in both, so they agree to f32
// rounding of the result: 2^-23 relative to the sum of |x|.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "error_of.hpp"
#include "gradcheck.hpp"
#include "graph_run.hpp"

using namespace memfit;
using memfit::testing::error_of;
using memfit::testing::grad_check;
using memfit::testing::GradInput;

namespace {

using memfit::testing::f32_input;
using memfit::testing::Ins;

}  // namespace

TEST(GradCheckBroadcast, BiasOverRows) {
  grad_check({f32_input({5, 3}), f32_input({3})}, [](Builder& b, const Ins& in) { return add_broadcast(b, in[0], in[1]); });
}

TEST(GradCheckBroadcast, TableOverTheBatchThenLinear) {
  // [B, T, C] + [T, C]: a position table; the linear after it makes dy vary.
  grad_check({f32_input({2, 4, 3}), f32_input({4, 3})},
             [](Builder& b, const Ins& in) { return linear(b, add_broadcast(b, in[0], in[1]), 2); });
}

TEST(GradCheckBroadcast, SameShapeIsAPlainAdd) {
  grad_check({f32_input({2, 3}), f32_input({2, 3})}, [](Builder& b, const Ins& in) { return add_broadcast(b, in[0], in[1]); });
}

// expand_leading: a class token [1, 3] over a batch of 4 then concatenated
// before the patches, as a ViT does; the linear after makes dy vary by row,
// so the gradient's sum over the rows is checked.
TEST(GradCheckBroadcast, ExpandOverTheBatchThenConcat) {
  grad_check({f32_input({1, 3}), f32_input({4, 2, 3})}, [](Builder& b, const Ins& in) {
    return linear(b, concat(b, {expand_leading(b, in[0], {4, 1, 3}), in[1]}, 1), 2);
  });
}

// The CPU table runs expand_leading's reference kernel (a copy per row):
// equal to it bit for bit on the fast backend, its gradient too.
TEST(Broadcast, ExpandRunsOnTheCpuBackend) {
  Graph g;
  Builder b(g);
  const ValueId x = g.input("x", {2, 5});
  const ValueId y = expand_leading(b, x, {3, 4, 2, 5});
  const ValueId s = g.add1("sum_leading", {y}, {{"shape", Shape{2, 5}}}, "sum");
  g.value(y).is_output = true;
  g.value(s).is_output = true;
  memfit::testing::GraphData data;
  std::vector<float> xv(10);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = 0.5f * static_cast<float>(i) - 2.0f;
  data.floats[x] = xv;
  const auto cpu = memfit::testing::run_graph(g, Backend::Cpu, data, {y, s});
  for (size_t r = 0; r < 12; ++r)
    for (size_t k = 0; k < 10; ++k) ASSERT_EQ(cpu.at(y)[r * 10 + k], xv[k]) << "row " << r;
  for (size_t k = 0; k < 10; ++k) EXPECT_EQ(cpu.at(s)[k], 12 * xv[k]);  // exact: small multiples of 0.5
  EXPECT_NE(error_of([&] { expand_leading(b, x, {3, 5, 2}); }).find("cannot expand [2, 5] to [3, 5, 2]"), std::string::npos);
}

TEST(Broadcast, CpuKernelsMatchTheReference) {
  for (const Shape& as : {Shape{7, 5}, Shape{3, 129, 70}, Shape{2, 1, 1}}) {
    const Shape bs(as.begin() + 1, as.end());
    Graph g;
    Builder b(g);
    const ValueId a = g.input("a", as), c = g.input("c", bs);
    const ValueId y = add_broadcast(b, a, c);
    const ValueId s = g.add1("sum_leading", {y}, {{"shape", bs}}, "sum");
    g.value(y).is_output = true;
    g.value(s).is_output = true;
    memfit::testing::GraphData data;
    std::vector<float> av(static_cast<size_t>(numel(as))), cv(static_cast<size_t>(numel(bs)));
    for (size_t i = 0; i < av.size(); ++i) av[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
    for (size_t i = 0; i < cv.size(); ++i) cv[i] = static_cast<float>(0.25 * static_cast<double>(i % 7) - 0.5);
    data.floats[a] = av;
    data.floats[c] = cv;
    const auto ref = memfit::testing::run_graph(g, Backend::Reference, data, {y, s});
    const auto cpu = memfit::testing::run_graph(g, Backend::Cpu, data, {y, s});
    EXPECT_EQ(cpu.at(y), ref.at(y)) << shape_str(as);
    const size_t R = av.size() / cv.size();
    for (size_t j = 0; j < cv.size(); ++j) {
      double mag = 0;
      for (size_t r = 0; r < R; ++r) mag += std::abs(av[r * cv.size() + j] + cv[j]);
      EXPECT_NEAR(cpu.at(s)[j], ref.at(s)[j], 0x1p-23 * mag + 1e-30) << shape_str(as) << " column " << j;
    }
  }
}

TEST(Broadcast, ShapeErrorsNameTheLayer) {
  Graph g;
  Builder b(g);
  const ValueId a = g.input("a", {2, 3, 4});
  const std::string e = error_of([&] { add_broadcast(b, a, g.input("c", {3})); });
  EXPECT_NE(e.find("cannot broadcast [3] over [2, 3, 4]"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { add_broadcast(b, a, g.input("d", {2, 3, 4, 1})); }).find("trailing"), std::string::npos);
}

TEST(Broadcast, Bf16ActivationsWithAnF32Bias) {
  // Under bf16 the bias is an f32 parameter: the gradient's sum is stored
  // f32, and the step runs (the reference kernels between conversions) with
  // the bias rounded like the activations.
  Graph g;
  Builder b(g);
  const ValueId x = g.input("x", {4, 3});
  const ValueId labels = g.input("labels", {4}, DType::i32);
  const ValueId bias = g.param("bias", {3});
  const ValueId z = cast(b, add_broadcast(b, cast(b, x, DType::bf16), bias), DType::f32);
  const ValueId loss = softmax_xent(b, z, labels);
  g.value(loss).is_loss = true;
  g.value(loss).is_output = true;
  build_backward(g, loss);
  const ValueId db = g.value(bias).grad;
  ASSERT_NE(db, kNone);
  EXPECT_EQ(g.value(db).dtype, DType::f32);
  g.value(db).is_output = true;
  memfit::testing::GraphData data;
  data.floats[x] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  data.ints[labels] = {0, 1, 2, 0};
  const auto out = memfit::testing::run_graph(g, Backend::Cpu, data, {loss, db});
  double sum = 0;
  for (float v : out.at(db)) {
    EXPECT_TRUE(std::isfinite(v));
    sum += v;
  }
  // Softmax gradients sum to 0 over the classes; here each of them was
  // rounded to bf16 (2^-9 relative) on its way back, and their magnitudes
  // sum to at most 2 (a mean over rows of |p - onehot|, each row <= 2).
  EXPECT_NEAR(sum, 0.0, 2 * 0x1p-9);
}
