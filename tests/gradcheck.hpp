// Gradient checks in double precision against central finite differences.
//
// A case builds a small graph from data inputs with the builder; the check
// appends the random-projection objective L = dot(out, r) (as a linear layer
// with a frozen weight r), runs autodiff, executes on the double-precision
// reference backend with gradient buffers poisoned by NaN, and compares every
// gradient (inputs and trainable parameters) with (L(v+h) - L(v-h)) / 2h.
//
// Tolerance: with h = 1e-6 in double the truncation error is O(h^2 f''') and
// the rounding error O(1e-16 |L| / h) ~ 1e-10 |L|, so |analytic - numeric| <=
// 1e-6 + 1e-5 |numeric| passes every correct kernel with a wide margin while
// a wrong term (a missing factor, a swapped index) is off by O(1).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "kernels/kernel.hpp"
#include "memfit/autodiff.hpp"
#include "memfit/builder.hpp"
#include "memfit/runtime.hpp"

namespace memfit::testing {

struct GradInput {
  Shape shape;
  DType dtype = DType::f32;
  bool differentiable = true;
  // Values for the input; empty: uniform in [-1, 1] (i32: in [0, int_range)).
  std::vector<double> values = {};
  int64_t int_range = 10;
};

using BuildFn = std::function<ValueId(Builder&, const std::vector<ValueId>&)>;

struct GradCheckOptions {
  double h = 1e-6, atol = 1e-6, rtol = 1e-5;
  size_t max_checks_per_tensor = 40;  // elements probed per tensor (evenly spaced + random)
  uint64_t seed = 7;
  // Keep inputs away from kinks (relu, max-pool ties): |x| >= margin.
  double margin = 0.0;
  // Applied to the graph after autodiff (e.g. a recomputation pass).
  std::function<void(Graph&)> after_backward;
};

inline void grad_check(const std::vector<GradInput>& ins, const BuildFn& build, GradCheckOptions opt = {}) {
  Graph g;
  Builder b(g, true);
  std::vector<ValueId> in_ids;
  std::vector<ValueId> wrt;
  for (size_t i = 0; i < ins.size(); ++i) {
    ValueId v = g.input("in" + std::to_string(i), ins[i].shape, ins[i].dtype);
    in_ids.push_back(v);
    if (ins[i].differentiable && ins[i].dtype == DType::f32) wrt.push_back(v);
  }
  ValueId out = build(b, in_ids);
  const int64_t n_out = numel(g.value(out).shape);
  ValueId flat = reshape(b, out, {1, n_out});
  ValueId r = g.param("objective.r", {1, n_out}, /*trainable=*/false);
  ValueId l = g.add1("linear", {flat, r}, {}, "objective");
  ValueId loss = reshape(b, l, {1});
  g.value(loss).is_output = true;
  BackwardResult bw = build_backward(g, loss, wrt);
  if (opt.after_backward) opt.after_backward(g);

  ExecConfig cfg;
  cfg.backend = Backend::Reference64;
  cfg.verify = true;
  Executor ex(g, cfg);
  ex.init_params(opt.seed);
  ex.poison(0xFF);
  std::mt19937_64 gen(opt.seed);
  std::uniform_real_distribution<double> U(-1.0, 1.0);
  {
    double* rp = ex.ptr<double>(r);
    for (int64_t i = 0; i < n_out; ++i) rp[i] = U(gen);
  }
  for (size_t i = 0; i < ins.size(); ++i) {
    const int64_t n = numel(ins[i].shape);
    if (ins[i].dtype == DType::i32) {
      int32_t* p = ex.ptr<int32_t>(in_ids[i]);
      for (int64_t k = 0; k < n; ++k)
        p[k] = ins[i].values.empty() ? static_cast<int32_t>(gen() % static_cast<uint64_t>(ins[i].int_range))
                                     : static_cast<int32_t>(ins[i].values[static_cast<size_t>(k)]);
    } else {
      double* p = ex.ptr<double>(in_ids[i]);
      for (int64_t k = 0; k < n; ++k) {
        double x = ins[i].values.empty() ? U(gen) : ins[i].values[static_cast<size_t>(k)];
        if (opt.margin > 0 && std::abs(x) < opt.margin) x = x < 0 ? -opt.margin - std::abs(x) : opt.margin + x;
        p[k] = x;
      }
    }
  }
  kernels::StepContext ctx;
  ctx.seed = 42;
  ex.run(ctx);
  // Snapshot analytic gradients.
  std::vector<std::pair<ValueId, std::vector<double>>> analytic;
  for (auto& [leaf, gv] : bw.grads) {
    const int64_t n = numel(g.value(leaf).shape);
    const double* gp = ex.ptr<double>(gv);
    analytic.push_back({leaf, std::vector<double>(gp, gp + n)});
    for (int64_t k = 0; k < n; ++k) ASSERT_TRUE(std::isfinite(gp[k])) << g.value(leaf).name << " grad[" << k << "] unwritten or not finite";
  }
  ASSERT_FALSE(analytic.empty());
  // Forward part of the schedule: everything before the loss seed.
  size_t fwd_end = 0;
  for (size_t k = 0; k < g.num_nodes(); ++k)
    if (g.node(static_cast<NodeId>(k)).phase == Phase::Forward) fwd_end = k + 1;
  auto loss_at = [&]() {
    ex.run_nodes(0, fwd_end, ctx);
    return ex.ptr<double>(loss)[0];
  };
  for (auto& [leaf, ag] : analytic) {
    double* p = ex.ptr<double>(leaf);
    const int64_t n = numel(g.value(leaf).shape);
    std::vector<int64_t> probe;
    const int64_t m = std::min<int64_t>(n, static_cast<int64_t>(opt.max_checks_per_tensor));
    for (int64_t k = 0; k < m; ++k) probe.push_back(k * n / m);
    for (int64_t k = 0; k < 4 && n > m; ++k) probe.push_back(static_cast<int64_t>(gen() % static_cast<uint64_t>(n)));
    for (int64_t k : probe) {
      const double saved = p[k];
      p[k] = saved + opt.h;
      const double lp = loss_at();
      p[k] = saved - opt.h;
      const double lm = loss_at();
      p[k] = saved;
      const double num = (lp - lm) / (2 * opt.h);
      const double a = ag[static_cast<size_t>(k)];
      EXPECT_LE(std::abs(a - num), opt.atol + opt.rtol * std::abs(num))
          << g.value(leaf).name << "[" << k << "]: analytic " << a << " vs numeric " << num;
    }
  }
}

// The inputs a BuildFn receives, and an f32 input drawn in [-1, 1].
using Ins = std::vector<ValueId>;
inline GradInput f32_input(Shape s) { return {.shape = std::move(s)}; }

}  // namespace memfit::testing
