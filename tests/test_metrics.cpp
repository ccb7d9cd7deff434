// xent_metrics, the evaluation metrics computed in the graph: hand-computed
// cases in double (padding rows skipped, ties to the first maximum, a label
// out of range makes the loss NaN), then the fast CPU kernel against the
// double reference on classification- and vocabulary-sized rows.
//
// Tolerance of the fast kernel: exp in f32 lanes is within 2 ulp and each
// f32 lane accumulator holds at most 64 terms (kernels/cpu/simd_math.hpp),
// so log sum exp of a row is within ~4e-6 absolute; per row 1e-5, and the
// f32 total adds its own rounding (2^-24 relative).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/kernel.hpp"
#include "memfit/builder.hpp"
#include "memfit/rng.hpp"
#include "memfit/runtime.hpp"

using namespace memfit;

namespace {

struct Metrics {
  double loss_sum, correct, count;
};

Metrics run_metrics(Backend backend, int64_t R, int64_t C, const std::vector<float>& z, const std::vector<int32_t>& y) {
  Graph g;
  Builder b(g, false);
  const ValueId logits = g.input("logits", {R, C});
  const ValueId labels = g.input("labels", {R}, DType::i32);
  const XentMetrics m = xent_metrics(b, logits, labels);
  for (ValueId v : {m.loss_sum, m.correct, m.count}) g.value(v).is_output = true;
  ExecConfig cfg;
  cfg.backend = backend;
  Executor ex(g, cfg);
  if (backend == Backend::Reference64) {
    std::vector<double> zd(z.begin(), z.end());
    ex.feed(logits, zd.data(), zd.size() * sizeof(double));
  } else {
    ex.feed(logits, z.data(), z.size() * sizeof(float));
  }
  ex.feed(labels, y.data(), y.size() * sizeof(int32_t));
  ex.run(kernels::StepContext{});
  return {ex.fetch_scalar(m.loss_sum), ex.fetch_scalar(m.correct), ex.fetch_scalar(m.count)};
}

double lse(const std::vector<double>& r) {
  double m = r[0];
  for (double v : r) m = std::max(m, v);
  double s = 0;
  for (double v : r) s += std::exp(v - m);
  return std::log(s) + m;
}

}  // namespace

TEST(Metrics, HandCaseEveryBackend) {
  // Row 0: label 1 is the maximum (correct). Row 1: padding. Row 2: label 3,
  // maximum at 0 (wrong). Row 3: a tie between 2 and 3, label 3 (the first
  // maximum, 2, is the prediction: wrong).
  const std::vector<float> z{0, 2, -1, 0.5f, 9, 9, 9, 9, 3, 1, 0, -2, 0, 1, 4, 4};
  const std::vector<int32_t> y{1, -1, 3, 3};
  const double want = (lse({0, 2, -1, 0.5}) - 2) + (lse({3, 1, 0, -2}) + 2) + (lse({0, 1, 4, 4}) - 4);
  for (Backend b : {Backend::Reference64, Backend::Reference, Backend::Cpu}) {
    const Metrics m = run_metrics(b, 4, 4, z, y);
    EXPECT_NEAR(m.loss_sum, want, b == Backend::Reference64 ? 1e-12 : 1e-5) << backend_name(b);
    EXPECT_EQ(m.correct, 1) << backend_name(b);
    EXPECT_EQ(m.count, 3) << backend_name(b);
  }
}

TEST(Metrics, LabelOutOfRangeMakesTheLossNaN) {
  const std::vector<float> z{1, 2, 3, 4, 5, 6};
  for (Backend b : {Backend::Reference, Backend::Cpu}) {
    const Metrics m = run_metrics(b, 2, 3, z, {0, 3});
    EXPECT_TRUE(std::isnan(m.loss_sum)) << backend_name(b);
    EXPECT_EQ(m.count, 2) << backend_name(b);
  }
}

TEST(Metrics, AllPaddingCountsNothing) {
  const Metrics m = run_metrics(Backend::Cpu, 3, 2, {1, 2, 3, 4, 5, 6}, {-1, -1, -1});
  EXPECT_EQ(m.loss_sum, 0);
  EXPECT_EQ(m.correct, 0);
  EXPECT_EQ(m.count, 0);
}

TEST(Metrics, CpuKernelMatchesTheDoubleReference) {
  struct Case {
    int64_t R, C;
  };
  for (const Case c : {Case{300, 10}, Case{257, 37}, Case{16, 50257}}) {
    std::vector<float> z(static_cast<size_t>(c.R * c.C));
    std::vector<int32_t> y(static_cast<size_t>(c.R));
    for (size_t i = 0; i < z.size(); ++i) z[i] = rng::uniform_sym(rng::stream_key(7, 1, 0), i, 8.0f);
    for (size_t i = 0; i < y.size(); ++i) {
      y[i] = static_cast<int32_t>(rng::uniform01(rng::stream_key(7, 2, 0), i) * static_cast<double>(c.C));
      if (i % 9 == 4) y[i] = -1;                            // padding
      if (i % 7 == 3) y[i] = static_cast<int32_t>(i % c.C);  // vary
    }
    // Make some rows right: the label's logit the largest.
    for (size_t i = 0; i < y.size(); i += 3)
      if (y[i] >= 0) z[i * static_cast<size_t>(c.C) + static_cast<size_t>(y[i])] = 30.0f;
    const Metrics ref = run_metrics(Backend::Reference64, c.R, c.C, z, y);
    const Metrics cpu = run_metrics(Backend::Cpu, c.R, c.C, z, y);
    EXPECT_NEAR(cpu.loss_sum, ref.loss_sum, 1e-5 * static_cast<double>(c.R) + 1.2e-7 * std::abs(ref.loss_sum))
        << c.R << "x" << c.C;
    EXPECT_EQ(cpu.correct, ref.correct) << c.R << "x" << c.C;
    EXPECT_EQ(cpu.count, ref.count) << c.R << "x" << c.C;
    EXPECT_GT(ref.correct, 0);
  }
}
