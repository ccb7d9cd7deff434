// The fast CPU kernels of layer_norm, gelu and softmax (and their backward
// ops) against the reference kernels, f32 and bf16 storage, and the vector
// math under them (kernels/cpu/simd_math.hpp). Each graph runs with guard
// bytes after every planned buffer (a write past one fails) and with the
// transient and gradient arenas poisoned with NaN (an unwritten element
// fails). Last axes 1, 7, 17, 768 and 2500 cover the masked tails, rows
// longer than one f32 flush (64 vectors), and, at 64 x 768 and above, the
// threaded loops. Also: every op in place gives the bits it gives out of
// place, the fast kernels give the same bits on one thread as on all, and
// a bf16 training graph through the three families matches the reference.
//
// Tolerances, each fixed and derived from how the kernels compute:
//  - kSum = 1e-5 of the sum of |term| for every sum (layer-norm statistics
//    and gradients, the softmax sum): the kernels add at most 64 terms in an
//    f32 lane before flushing to double (64 2^-24 = 3.8e-6 of sum|term|), and
//    round a few times more; the reference sums in double. A missing or
//    wrong term is off by a whole term, >= 1/2500 of sum|term| here.
//  - GELU: tests/norm_tolerance.hpp's f32 error model, (16 + 4 |a|) 2^-24
//    relative, a the argument of exp inside (-x^2/2 or -2u), of the value
//    and of the sum of gelu's |terms| for its gradient (gelu' = Phi + x phi
//    cancels near x = -0.75).
//  - softmax y: kSum relative: exp's argument x - max is rounded to f32
//    (|x - max| 2^-25 <= 5e-7 for the inputs here, |x| <= 8), the sum as
//    above, a division and a product.
//  - bf16 outputs: as tests/test_cpu_bf16.cpp, the oracle rounded to bf16
//    and 2^-7 |want| (the two roundings may fall either side of a boundary)
//    on top of the f32 bound.
//  - an absolute 2^-126 where values may underflow (the fast exp flushes
//    results below 2^-126 to zero).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "kernel_cases.hpp"
#include "kernel_check.hpp"
#include "kernels/bf16.hpp"
#include "kernels/cpu/engine.hpp"
#include "kernels/cpu/simd_math.hpp"
#include "memfit/autodiff.hpp"
#include "memfit/builder.hpp"
#include "memfit/runtime.hpp"
#include "norm_tolerance.hpp"
#include "ops/gelu/cpu.hpp"
#include "ops/gelu/ref.hpp"
#include "ops/layernorm/cpu.hpp"
#include "ops/layernorm/ref.hpp"
#include "ops/softmax/cpu.hpp"
#include "ops/softmax/ref.hpp"

using namespace memfit;
using memfit::testing::gelu_f32_rel;
using memfit::testing::gelu_grad_terms;
using namespace memfit::testing::kernel_check;

namespace {

constexpr double kSum = 1e-5;

bool skip_bf16(bool bf16) { return bf16 && !kernels::cpu::bf16_kernels_available(); }
#define SKIP_WITHOUT_BF16(bf16)                                                                              \
  if (skip_bf16(bf16)) {                                                                                     \
    EXPECT_EQ(kernels::cpu::make_softmax({1, 16}, kernels::ElemType::BF16), nullptr);                        \
    GTEST_SKIP() << "no bf16 vector loops in this build (no AVX-512): bf16 nodes run as f32 kernels between " \
                    "conversions";                                                                           \
  }

// Name##F32 and Name##Bf16 run check(false) and check(true).
#define NORM_KERNEL_TESTS(Name, check)          \
  TEST(NormKernels, Name##F32) { check(false); } \
  TEST(NormKernels, Name##Bf16) {                \
    SKIP_WITHOUT_BF16(true);                     \
    check(true);                                 \
  }

}  // namespace

// --------------------------------------------------------------- simd math ----

TEST(SimdMath, ExpAndErfcAccuracy) {
  using kernels::cpu::simd::V;
  namespace simd = kernels::cpu::simd;
  auto apply = [](const std::vector<float>& x, V (*f)(V)) {
    std::vector<float> y(x.size());
    for (size_t i = 0; i < x.size(); i += 16) {
      const auto m = simd::lanes(static_cast<int64_t>(x.size() - i));
      simd::store(y.data() + i, f(simd::load(x.data() + i, m)), m);
    }
    return y;
  };
  // exp on [-87.33, 88]: within 2 ulp (2^-23 relative).
  std::vector<float> x;
  for (double v = -87.33; v <= 88.0; v += 0.00123) x.push_back(static_cast<float>(v));
  std::vector<float> y = apply(x, simd::vexp);
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    worst = std::max(worst, std::abs(y[i] - want) / want);
  }
  EXPECT_LE(worst, 0x1p-23) << "vexp's largest relative error";
  std::printf("    vexp: max relative error %.3g (%.2f ulp) over %zu points\n", worst, worst / 0x1p-24, x.size());
  // Edges: exact 1 at 0, 0 below the normal range, inf above 88, NaN kept.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> e = apply({0.0f, -88.0f, -1000.0f, -inf, 88.5f, inf, nan}, simd::vexp);
  EXPECT_EQ(e[0], 1.0f);
  EXPECT_EQ(e[1], 0.0f);
  EXPECT_EQ(e[2], 0.0f);
  EXPECT_EQ(e[3], 0.0f);
  EXPECT_EQ(e[4], inf);
  EXPECT_EQ(e[5], inf);
  EXPECT_TRUE(std::isnan(e[6]));
  // erfc on [0, 5]: within 2e-6 relative (1e-6 up to 3).
  std::vector<float> z;
  for (double v = 0.0; v <= 5.0; v += 0.0005) z.push_back(static_cast<float>(v));
  std::vector<float> ez = apply(z, simd::verfc);
  double w3 = 0, w5 = 0;
  for (size_t i = 0; i < z.size(); ++i) {
    const double want = std::erfc(static_cast<double>(z[i])), rel = std::abs(ez[i] - want) / want;
    (z[i] <= 3.0f ? w3 : w5) = std::max(z[i] <= 3.0f ? w3 : w5, rel);
  }
  EXPECT_LE(w3, 1e-6) << "verfc on [0, 3]";
  EXPECT_LE(w5, 2e-6) << "verfc on (3, 5]";
  std::printf("    verfc: max relative error %.3g on [0, 3], %.3g on (3, 5]\n", w3, w5);
}

// -------------------------------------------------------------- layer norm ----

namespace {

// Row statistics of x (double), for tolerances and the backward's inputs.
struct RowStats {
  std::vector<double> mean, rstd, abs_mean;
};
RowStats row_stats(const std::vector<float>& x, int64_t R, int64_t D, double eps) {
  RowStats s;
  for (int64_t r = 0; r < R; ++r) {
    double sum = 0, asum = 0, ss = 0;
    for (int64_t j = 0; j < D; ++j) {
      sum += x[static_cast<size_t>(r * D + j)];
      asum += std::abs(x[static_cast<size_t>(r * D + j)]);
    }
    const double m = sum / static_cast<double>(D);
    for (int64_t j = 0; j < D; ++j) ss += std::pow(x[static_cast<size_t>(r * D + j)] - m, 2);
    s.mean.push_back(m);
    s.abs_mean.push_back(asum / static_cast<double>(D));
    s.rstd.push_back(1.0 / std::sqrt(ss / static_cast<double>(D) + eps));
  }
  return s;
}

const std::vector<Shape>& ln_shapes() {
  static const std::vector<Shape> s = {{5, 1}, {3, 7}, {200, 17}, {2, 3, 768}, {64, 768}, {3, 2500}, {2, 2, 3, 33}};
  return s;
}

}  // namespace

// y within kSum ((|x - mean| + mean|x|) rstd |gamma| + |beta|) (the
// statistics within kSum of mean|x| and rstd), as test_cpu_kernels.cpp's
// batch norm.
static void check_layer_norm_forward(bool bf16) {
  for (const Shape& xs : ln_shapes()) {
    SCOPED_TRACE(shape_str(xs) + " " + tname(bf16));
    const int64_t D = xs.back(), R = numel(xs) / D;
    const size_t n = static_cast<size_t>(R * D);
    Graph g;
    ValueId x = g.input("x", xs, storage(bf16)), gamma = g.input("gamma", {D}), beta = g.input("beta", {D});
    auto outs = g.add_node("layer_norm", {x, gamma, beta}, {{"eps", 1e-5}}, "ln");
    for (ValueId v : outs) g.value(v).is_output = true;
    Feed f{{x, uniform(n, 11, -1.5f, 3.5f, bf16)}, {gamma, uniform(D, 12, -1.5f, 1.5f, false)},
           {beta, uniform(D, 13, -1.0f, 1.0f, false)}};
    const Result cpu = run(g, Backend::Cpu, f, outs);
    EXPECT_EQ(cpu.kernels[0], bf16 ? "cpu.layer_norm.bf16" : "cpu.layer_norm");
    std::vector<double> xd = dbl(f[x]), gd = dbl(f[gamma]), bd = dbl(f[beta]), y(n), mean(R), rstd(R);
    oracle<kernels::ref::LayerNorm>(kernels::LayerNormParams{R, D}, {&xd, &gd, &bd}, {&y, &mean, &rstd});
    const RowStats st = row_stats(f[x], R, D, 1e-5);
    auto ty = [&](size_t k) {
      const size_t r = k / static_cast<size_t>(D), j = k % static_cast<size_t>(D);
      const double t = kSum * ((std::abs(xd[k] - st.mean[r]) + st.abs_mean[r]) * st.rstd[r] * std::abs(gd[j]) +
                               std::abs(bd[j]));
      return bf16 ? t + kRel * std::abs(y[k]) : t;
    };
    expect_close("y", cpu.out.at(outs[0]), stored(y, bf16), ty);
    expect_close("mean", cpu.out.at(outs[1]), mean, [&](size_t r) { return kSum * st.abs_mean[r]; });
    expect_close("rstd", cpu.out.at(outs[2]), rstd, [&](size_t r) { return kSum * rstd[r]; });
    if (!bf16) {  // and the f32 reference kernel agrees with the double one
      const Result ref = run(g, Backend::Reference, f, outs);
      expect_close("ref y", ref.out.at(outs[0]), y, ty);
    }
  }
  print_worst();
}

NORM_KERNEL_TESTS(LayerNormForward, check_layer_norm_forward)

// dx within kSum rstd (|g| + mean|g| + |xhat| mean|g xhat|), g = dy gamma;
// dgamma within kSum sum_R |dy xhat|, dbeta within kSum sum_R |dy|.
static void check_layer_norm_backward(bool bf16) {
  for (const Shape& xs : ln_shapes()) {
    SCOPED_TRACE(shape_str(xs) + " " + tname(bf16));
    const int64_t D = xs.back(), R = numel(xs) / D;
    const size_t n = static_cast<size_t>(R * D);
    Graph g;
    ValueId x = g.input("x", xs, storage(bf16)), dy = g.input("dy", xs, storage(bf16)), gamma = g.input("gamma", {D}),
            mean = g.input("mean", {R}), rstd = g.input("rstd", {R});
    auto outs = g.add_node("layer_norm_bwd", {x, dy, gamma, mean, rstd}, {{"eps", 1e-5}}, "ln", Phase::Backward);
    for (ValueId v : outs) g.value(v).is_output = true;
    Feed f{{x, uniform(n, 21, -1.5f, 3.5f, bf16)}, {dy, uniform(n, 22, -1.0f, 1.0f, bf16)},
           {gamma, uniform(D, 23, -1.5f, 1.5f, false)}};
    const RowStats st = row_stats(f[x], R, D, 1e-5);
    f[mean].assign(st.mean.begin(), st.mean.end());  // the statistics the forward gives, in f32
    f[rstd].assign(st.rstd.begin(), st.rstd.end());
    const Result cpu = run(g, Backend::Cpu, f, outs);
    EXPECT_EQ(cpu.kernels[0], bf16 ? "cpu.layer_norm_bwd.bf16" : "cpu.layer_norm_bwd");
    std::vector<double> xd = dbl(f[x]), dyd = dbl(f[dy]), gd = dbl(f[gamma]), md = dbl(f[mean]), rd = dbl(f[rstd]),
                        dx(n), dg(D), db(D);
    oracle<kernels::ref::LayerNormBwd>(kernels::LayerNormParams{R, D}, {&xd, &dyd, &gd, &md, &rd}, {&dx, &dg, &db});
    std::vector<double> tdx(n), tdg(D, 0.0), tdb(D, 0.0);
    for (int64_t r = 0; r < R; ++r) {
      double ag = 0, agx = 0;
      for (int64_t j = 0; j < D; ++j) {
        const size_t k = static_cast<size_t>(r * D + j);
        const double xhat = (xd[k] - md[r]) * rd[r];
        ag += std::abs(dyd[k] * gd[j]) / static_cast<double>(D);
        agx += std::abs(dyd[k] * gd[j] * xhat) / static_cast<double>(D);
        tdg[j] += kSum * std::abs(dyd[k] * xhat);
        tdb[j] += kSum * std::abs(dyd[k]);
      }
      for (int64_t j = 0; j < D; ++j) {
        const size_t k = static_cast<size_t>(r * D + j);
        tdx[k] = kSum * rd[r] * (std::abs(dyd[k] * gd[j]) + ag + std::abs((xd[k] - md[r]) * rd[r]) * agx);
        if (bf16) tdx[k] += kRel * std::abs(dx[k]);
      }
    }
    expect_close("dx", cpu.out.at(outs[0]), stored(dx, bf16), [&](size_t i) { return tdx[i] + kTiny; });
    expect_close("dgamma", cpu.out.at(outs[1]), dg, [&](size_t j) { return tdg[j] + kTiny; });
    expect_close("dbeta", cpu.out.at(outs[2]), db, [&](size_t j) { return tdb[j] + kTiny; });
  }
  print_worst();
}

NORM_KERNEL_TESTS(LayerNormBackward, check_layer_norm_backward)

// -------------------------------------------------------------------- gelu ----

static void check_gelu(bool bf16) {
  for (bool tanh : {false, true}) {
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(17), int64_t(768 * 3), int64_t(100003)}) {
      SCOPED_TRACE(std::to_string(n) + (tanh ? " tanh " : " exact ") + tname(bf16));
      const size_t un = static_cast<size_t>(n);
      Graph g;
      ValueId x = g.input("x", {n}, storage(bf16)), dy = g.input("dy", {n}, storage(bf16));
      const Attrs a{{"approximate", std::string(tanh ? "tanh" : "none")}};
      ValueId y = g.add1("gelu", {x}, a, "act");
      ValueId dx = g.add1("gelu_bwd", {x, dy}, a, "act", Phase::Backward);
      g.value(y).is_output = g.value(dx).is_output = true;
      Feed f{{x, uniform(un, 31, -6.0f, 6.0f, bf16)}, {dy, uniform(un, 32, -1.0f, 1.0f, bf16)}};
      const Result cpu = run(g, Backend::Cpu, f, {y, dx});
      EXPECT_EQ(cpu.kernels[0], bf16 ? "cpu.gelu.bf16" : "cpu.gelu");
      EXPECT_EQ(cpu.kernels[1], bf16 ? "cpu.gelu_bwd.bf16" : "cpu.gelu_bwd");
      std::vector<double> xd = dbl(f[x]), dyd = dbl(f[dy]), yd(un), dxd(un);
      const kernels::GeluParams p{n, tanh};
      oracle<kernels::ref::Gelu>(p, {&xd}, {&yd});
      oracle<kernels::ref::GeluBwd>(p, {&xd, &dyd}, {&dxd});
      const double rel = bf16 ? kRel : 0.0;
      expect_close("y", cpu.out.at(y), stored(yd, bf16),
                   [&](size_t i) { return (gelu_f32_rel(xd[i], tanh) + rel) * std::abs(yd[i]) + kTiny; });
      expect_close("dx", cpu.out.at(dx), stored(dxd, bf16), [&](size_t i) {
        return gelu_f32_rel(xd[i], tanh) * std::abs(dyd[i]) * gelu_grad_terms(xd[i], tanh) + rel * std::abs(dxd[i]) +
               kTiny;
      });
    }
  }
  print_worst();
}

NORM_KERNEL_TESTS(Gelu, check_gelu)

// ----------------------------------------------------------------- softmax ----

static void check_softmax(bool bf16) {
  for (Shape xs : {Shape{4, 1}, Shape{3, 7}, Shape{5, 17}, Shape{2, 3, 768}, Shape{64, 768}, Shape{2, 2500},
                   Shape{2, 3, 4, 33}}) {
    SCOPED_TRACE(shape_str(xs) + " " + tname(bf16));
    const int64_t D = xs.back(), R = numel(xs) / D;
    const size_t n = static_cast<size_t>(R * D);
    Graph g;
    ValueId x = g.input("x", xs, storage(bf16)), yin = g.input("y", xs, storage(bf16)),
            dy = g.input("dy", xs, storage(bf16));
    ValueId y = g.add1("softmax", {x}, {}, "sm");
    ValueId dx = g.add1("softmax_bwd", {yin, dy}, {}, "sm", Phase::Backward);
    g.value(y).is_output = g.value(dx).is_output = true;
    Feed f{{x, uniform(n, 41, -8.0f, 8.0f, bf16)}, {dy, uniform(n, 42, -1.0f, 1.0f, bf16)}};
    const kernels::SoftmaxParams p{R, D};
    std::vector<double> xd = dbl(f[x]), yd(n);
    oracle<kernels::ref::Softmax>(p, {&xd}, {&yd});
    // The backward reads the forward's output as stored.
    const std::vector<double> ys = bf16 ? stored(yd, true) : as_f32(yd);
    f[yin].assign(ys.begin(), ys.end());
    const Result cpu = run(g, Backend::Cpu, f, {y, dx});
    EXPECT_EQ(cpu.kernels[0], bf16 ? "cpu.softmax.bf16" : "cpu.softmax");
    EXPECT_EQ(cpu.kernels[1], bf16 ? "cpu.softmax_bwd.bf16" : "cpu.softmax_bwd");
    std::vector<double> dyd = dbl(f[dy]), dxd(n);
    std::vector<double> yv = ys;
    oracle<kernels::ref::SoftmaxBwd>(p, {&yv, &dyd}, {&dxd});
    std::vector<double> sdy(static_cast<size_t>(R), 0.0);
    for (size_t k = 0; k < n; ++k) sdy[k / static_cast<size_t>(D)] += std::abs(dyd[k] * ys[k]);
    const double rel = bf16 ? kRel : 0.0;
    expect_close("y", cpu.out.at(y), stored(yd, bf16), [&](size_t i) { return (kSum + rel) * yd[i] + kTiny; });
    // dx = y (dy - s): kSum y (|dy| + 2 sum|dy y|) (s's error and its size).
    expect_close("dx", cpu.out.at(dx), stored(dxd, bf16), [&](size_t i) {
      return kSum * ys[i] * (std::abs(dyd[i]) + 2.0 * sdy[i / static_cast<size_t>(D)]) + rel * std::abs(dxd[i]) +
             kTiny;
    });
  }
  print_worst();
}

NORM_KERNEL_TESTS(Softmax, check_softmax)

// -------------------------------------------------- in place, thread count ----

// Every op runs with its output over the buffer its traits name (the planner
// does so here: that input is a transient that dies at the op) and gives the
// same bits as with in-place reuse off, on the fast kernels and the
// reference; and the fast kernels give the same bits on one thread as on
// all of them.
TEST(NormKernels, InPlaceAndThreadCountChangeNothing) {
  const Shape xs{48, 1000};  // 48000 elements: the threaded loops
  const int64_t D = xs.back(), R = numel(xs) / D;
  const size_t n = static_cast<size_t>(R * D);
  for (bool bf16 : {false, true}) {
    if (skip_bf16(bf16)) continue;
    for (const char* op : {"layer_norm", "gelu", "softmax", "layer_norm_bwd", "gelu_bwd", "softmax_bwd"}) {
      SCOPED_TRACE(std::string(op) + " " + tname(bf16));
      Graph g;
      const DType t = storage(bf16);
      ValueId a = g.input("a", xs, t), b = g.input("b", xs, t);
      ValueId gamma = g.input("gamma", {D}), beta = g.input("beta", {D});
      ValueId mean = g.input("mean", {R}), rstd = g.input("rstd", {R});
      const std::string o = op;
      const bool bwd = o.find("_bwd") != std::string::npos;
      // The operand the output may overwrite (x forward, dy backward), made
      // by a node so that it is a transient.
      ValueId over = g.add1("scale", {bwd ? b : a}, {{"alpha", 1.0}}, "copy");
      std::vector<ValueId> ins;
      if (o == "layer_norm") ins = {over, gamma, beta};
      else if (o == "layer_norm_bwd") ins = {a, over, gamma, mean, rstd};
      else if (bwd) ins = {a, over};
      else ins = {over};
      const Attrs at = o.rfind("gelu", 0) == 0 ? Attrs{{"approximate", std::string("tanh")}} : Attrs{{"eps", 1e-5}};
      auto outs = g.add_node(op, ins, at, "op", bwd ? Phase::Backward : Phase::Forward);
      for (ValueId v : outs) g.value(v).is_output = true;
      Feed f{{a, uniform(n, 51, -2.0f, 3.0f, bf16)}, {b, uniform(n, 52, -1.0f, 1.0f, bf16)},
             {gamma, uniform(D, 53, 0.5f, 1.5f, false)}, {beta, uniform(D, 54, -1.0f, 1.0f, false)},
             {mean, uniform(R, 55, 0.0f, 1.0f, false)}, {rstd, uniform(R, 56, 0.5f, 2.0f, false)}};
      if (o == "softmax_bwd")  // y must be a distribution for the formula to mean something; any values do for bits
        for (float& v : f[a]) v = kernels::round_bf16(std::abs(v) / static_cast<float>(D));
      {
        ExecConfig cfg;
        cfg.backend = Backend::Cpu;
        Executor ex(g, cfg);
        EXPECT_EQ(ex.plan().values[static_cast<size_t>(outs[0])].root, ex.plan().values[static_cast<size_t>(over)].root)
            << "the planner did not run " << op << " in place";
      }
      for (Backend backend : {Backend::Cpu, Backend::Reference}) {
        const Result in = run(g, backend, f, outs, true), apart = run(g, backend, f, outs, false);
        for (ValueId v : outs)
          EXPECT_EQ(0, std::memcmp(in.out.at(v).data(), apart.out.at(v).data(), in.out.at(v).size() * 4))
              << g.value(v).name << " differs in place on " << backend_name(backend);
      }
      const int threads = omp_get_max_threads();
      omp_set_num_threads(1);
      const Result one = run(g, Backend::Cpu, f, outs);
      omp_set_num_threads(threads);
      const Result all = run(g, Backend::Cpu, f, outs);
      for (ValueId v : outs)
        EXPECT_EQ(0, std::memcmp(one.out.at(v).data(), all.out.at(v).data(), one.out.at(v).size() * 4))
            << g.value(v).name << " depends on the thread count (" << threads << ")";
    }
  }
}

// A bf16 training graph through the three families (x cast to bf16, layer
// norm with f32 parameters, the loss in f32): the fast CPU lowering (the
// bf16 kernels, or in a build without them the f32 kernels between
// conversions) against the f32 reference kernels between conversions
// (runtime/mixed.hpp). Both compute in f32 from the same bf16 values and
// round each output to bf16 once, so they differ where a rounding falls on
// the other side of a boundary: an intermediate one ulp (2^-8 relative)
// apart moves what follows by about as much, and the values agree within
// 2^-5 of each tensor's largest element (8 ulps over three ops and their
// gradients), while an operand read as the wrong type or a wrong index is
// off by O(1).
TEST(NormKernels, Bf16TrainingGraphMatchesReference) {
  Graph g;
  Builder b(g);
  ValueId x = g.input("x", {6, 40});
  ValueId h = cast(b, x, DType::bf16);
  h = softmax(b, gelu(b, layer_norm(b, h, {.name = "ln"}), true));
  ValueId y = cast(b, h, DType::f32);
  ValueId r = g.param("objective.r", {1, 240}, /*trainable=*/false);
  ValueId loss = reshape(b, g.add1("linear", {reshape(b, y, {1, 240}), r}, {}, "objective"), {1});
  g.value(loss).is_output = g.value(y).is_output = true;
  const BackwardResult bw = build_backward(g, loss, {x});
  const ValueId w = g.find("ln.weight"), bias = g.find("ln.bias");
  std::vector<ValueId> read{y, bw.grads.at(x), bw.grads.at(w), bw.grads.at(bias)};
  Feed f{{x, uniform(240, 61, -2.0f, 3.0f, false)}, {r, uniform(240, 62, -1.0f, 1.0f, false)},
         {w, uniform(40, 63, 0.5f, 1.5f, false)}, {bias, uniform(40, 64, -0.5f, 0.5f, false)}};
  const Result cpu = run(g, Backend::Cpu, f, read), ref = run(g, Backend::Reference, f, read);
  for (size_t k = 0; k < g.num_nodes(); ++k) {
    if (g.node(static_cast<NodeId>(k)).op == "layer_norm_bwd" && kernels::cpu::bf16_kernels_available()) {
      EXPECT_EQ(cpu.kernels[k], "cpu.layer_norm_bwd.bf16");
    }
  }
  for (ValueId v : read) {
    double mx = 0;
    for (float e : ref.out.at(v)) mx = std::max(mx, static_cast<double>(std::abs(e)));
    EXPECT_GT(mx, 1e-4) << g.value(v).name << " is (nearly) zero: the check would be empty";
    const std::vector<double> want = dbl(ref.out.at(v));
    expect_close(g.value(v).name, cpu.out.at(v), want, [&](size_t) { return 0x1p-5 * mx; });
  }
  print_worst();
}

TEST(NormKernels, FactoriesRefuseOtherTypes) {
  using kernels::ElemType;
  EXPECT_STREQ(kernels::cpu::make_layer_norm({2, 8})->name(), "cpu.layer_norm");
  EXPECT_STREQ(kernels::cpu::make_gelu({8})->name(), "cpu.gelu");
  EXPECT_STREQ(kernels::cpu::make_softmax_bwd({2, 8})->name(), "cpu.softmax_bwd");
  EXPECT_EQ(kernels::cpu::make_layer_norm_bwd({2, 8}, ElemType::F64), nullptr);
  EXPECT_EQ(kernels::cpu::make_gelu_bwd({8}, ElemType::F64), nullptr);
  EXPECT_EQ(kernels::cpu::make_softmax({2, 8}, ElemType::F64), nullptr);
  EXPECT_EQ(kernels::cpu::make_softmax({2, 8}, ElemType::BF16) != nullptr, kernels::cpu::bf16_kernels_available());
}
