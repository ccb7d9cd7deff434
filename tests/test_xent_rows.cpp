// xent_rows, the row-wise cross-entropy for large vocabularies (issue #12):
// a hand case in double (padding rows, an all-padding batch, a target out of
// range), gradient checks in double (padding, smoothing, logits from a
// layer, rows with two leading axes), the fast CPU kernel against the
// double reference on odd widths (V = 1, 17, 50257), a thread-count
// independent loss, in place equal to out of place, PyTorch's
// F.cross_entropy(ignore_index, label_smoothing), and the plan of an LM-like
// training graph: one [R, V] buffer instead of softmax_xent's two.
//
// Tolerances of the fast kernel against the double reference: exp in f32
// lanes is within 2 ulp and each f32 lane accumulator holds at most 64 terms
// (kernels/cpu/simd_math.hpp), so a row's lse is within ~4e-6 of exact
// (checked at 1e-5 + 1e-6 |lse|), the loss (a mean of such rows, summed in
// double) at 1e-5 (1 + |loss|). dlogits = (exp(z - lse) - q) g with lse
// stored in f32: exp(z - lse) carries the rounding of lse and of z - lse in
// f32 (|z - lse| < 40 here: 2.4e-6 absolute, so that relative in p) plus
// vexp's 2 ulp, and (p - s/V) and the product round in f32: every element
// is within 1e-5 (|p| + q) g <= 1e-5 (|dlogit| + 2 g).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "token_model.hpp"
#include "gradcheck.hpp"
#include "io/safetensors.hpp"
#include "kernels/kernel.hpp"
#include "memfit/autodiff.hpp"
#include "memfit/builder.hpp"
#include "memfit/optim.hpp"
#include "memfit/runtime.hpp"
#include "compile/step_graph.hpp"

using namespace memfit;
using memfit::testing::GradCheckOptions;
using memfit::testing::GradInput;
using memfit::testing::grad_check;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// logits -> xent_rows -> (loss, lse); xent_rows_bwd(logits, lse, targets,
// dloss) -> dz. transient: the logits are scale(x, 1) (a transient value the
// planner may give to dz) instead of the input x itself.
struct XentGraph {
  Graph g;
  ValueId x = kNone, z = kNone, t = kNone, dl = kNone, loss = kNone, lse = kNone, dz = kNone;
};

void build(XentGraph& c, const Shape& zs, double s, bool transient, bool keep_logits = false) {
  Graph& g = c.g;
  c.x = g.input("x", zs);
  c.z = transient ? g.add1("scale", {c.x}, {{"alpha", 1.0}}, "logits") : c.x;
  c.t = g.input("targets", Shape(zs.begin(), zs.end() - 1), DType::i32);
  c.dl = g.input("dloss", {1});
  const auto o = g.add_node("xent_rows", {c.z, c.t}, {{"smoothing", s}}, "loss");
  c.loss = o[0];
  c.lse = o[1];
  c.dz = g.add1("xent_rows_bwd", {c.z, c.lse, c.t, c.dl}, {{"smoothing", s}}, "loss", Phase::Backward);
  for (ValueId v : {c.loss, c.lse, c.dz}) g.value(v).is_output = true;
  if (keep_logits) g.value(c.z).is_output = true;
}

struct Result {
  std::vector<double> loss, lse, dz;
  std::vector<std::string> kernels;
  bool dz_over_logits = false;
};

std::vector<double> fetch(Executor& ex, ValueId v, Backend b) {
  const size_t n = static_cast<size_t>(numel(ex.graph().value(v).shape));
  std::vector<double> o(n);
  if (b == Backend::Reference64) {
    std::memcpy(o.data(), ex.ptr<double>(v), n * sizeof(double));
  } else {
    const float* p = ex.ptr<float>(v);
    for (size_t i = 0; i < n; ++i) o[i] = p[i];
  }
  return o;
}

Result run(const XentGraph& c, Backend b, const std::vector<double>& z, const std::vector<int32_t>& t, double dloss = 1.0,
           int threads = 0) {
  ExecConfig cfg;
  cfg.backend = b;
  cfg.verify = true;
  cfg.plan.guard_bytes = 64;
  Executor ex(c.g, cfg);
  ex.poison(0xFF);
  if (b == Backend::Reference64) {
    std::memcpy(ex.ptr<double>(c.x), z.data(), z.size() * sizeof(double));
    ex.ptr<double>(c.dl)[0] = dloss;
  } else {
    float* p = ex.ptr<float>(c.x);
    for (size_t i = 0; i < z.size(); ++i) p[i] = static_cast<float>(z[i]);
    ex.ptr<float>(c.dl)[0] = static_cast<float>(dloss);
  }
  std::memcpy(ex.ptr<int32_t>(c.t), t.data(), t.size() * sizeof(int32_t));
  const int saved = omp_get_max_threads();
  if (threads > 0) omp_set_num_threads(threads);
  ex.run(kernels::StepContext{});
  omp_set_num_threads(saved);
  EXPECT_TRUE(ex.guards_intact()) << ex.broken_guard();
  Result r{fetch(ex, c.loss, b), fetch(ex, c.lse, b), fetch(ex, c.dz, b), {}, false};
  for (size_t k = 0; k < c.g.num_nodes(); ++k) r.kernels.push_back(ex.kernel_name(k));
  r.dz_over_logits = ex.plan().values[static_cast<size_t>(c.dz)].root == ex.plan().values[static_cast<size_t>(c.z)].root;
  return r;
}

// The definition, independently of the kernels: per counted row, log
// softmax by max subtraction, loss -sum_c q_c log p_c, gradient (p - q)/n.
struct Expected {
  double loss;
  std::vector<double> lse, dz;
};

Expected expected(const std::vector<double>& z, const std::vector<int32_t>& t, int64_t V, double s, double dloss = 1.0) {
  const int64_t R = static_cast<int64_t>(t.size());
  Expected e{0.0, std::vector<double>(static_cast<size_t>(R), 0.0), std::vector<double>(z.size(), 0.0)};
  int64_t n = 0;
  for (int32_t y : t) n += y >= 0;
  for (int64_t r = 0; r < R; ++r) {
    const int32_t y = t[static_cast<size_t>(r)];
    if (y < 0) continue;
    const double* zr = z.data() + r * V;
    double m = zr[0];
    for (int64_t c = 1; c < V; ++c) m = std::max(m, zr[c]);
    double sum = 0;
    for (int64_t c = 0; c < V; ++c) sum += std::exp(zr[c] - m);
    const double l = m + std::log(sum);
    e.lse[static_cast<size_t>(r)] = l;
    for (int64_t c = 0; c < V; ++c) {
      const double q = (c == y ? 1.0 - s : 0.0) + s / static_cast<double>(V);
      if (y < V) e.loss -= q * (zr[c] - l);
      e.dz[static_cast<size_t>(r * V + c)] = y < V ? (std::exp(zr[c] - l) - q) * dloss / static_cast<double>(n) : kNaN;
    }
    if (y >= V) e.loss = kNaN;
  }
  e.loss = n ? e.loss / static_cast<double>(n) : 0.0;
  return e;
}

std::vector<double> uniform(size_t n, double scale, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> U(-scale, scale);
  std::vector<double> v(n);
  // f32-exact, so that both backends see the same values
  for (double& x : v) x = static_cast<float>(U(gen));
  return v;
}

std::vector<int32_t> targets(int64_t R, int64_t V, const std::vector<int64_t>& pad, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<int32_t> t(static_cast<size_t>(R));
  for (int32_t& y : t) y = static_cast<int32_t>(gen() % static_cast<uint64_t>(V));
  for (int64_t p : pad) t[static_cast<size_t>(p)] = -1;
  return t;
}

void expect_near_all(const std::string& what, const std::vector<double>& got, const std::vector<double>& want,
                     double atol, double rtol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << "[" << i << "] = " << got[i] << ", want NaN";
      continue;
    }
    const bool ok = std::abs(got[i] - want[i]) <= atol + rtol * std::abs(want[i]);
    EXPECT_TRUE(ok) << what << "[" << i << "] = " << got[i] << ", want " << want[i];
    bad += !ok;
  }
}

}  // namespace

// ------------------------------------------------------------ hand cases ----

TEST(XentRows, HandCaseEveryBackend) {
  const int64_t V = 5;
  const std::vector<double> z = uniform(4 * V, 3.0, 1);
  const std::vector<int32_t> t{3, -1, 0, -7};  // two padding rows (any negative)
  for (double s : {0.0, 0.15}) {
    const Expected e = expected(z, t, V, s, 2.0);
    for (Backend b : {Backend::Reference64, Backend::Reference, Backend::Cpu}) {
      SCOPED_TRACE(std::string(backend_name(b)) + " smoothing " + std::to_string(s));
      XentGraph c;
      build(c, {4, V}, s, false);
      const Result r = run(c, b, z, t, 2.0);
      const double tol = b == Backend::Reference64 ? 1e-13 : 1e-5;
      EXPECT_NEAR(r.loss[0], e.loss, tol * (1 + std::abs(e.loss)));
      // lse is written for counted rows (padding: 0)
      expect_near_all("lse", r.lse, e.lse, tol, tol);
      expect_near_all("dz", r.dz, e.dz, tol, tol);
      // padding rows get exactly zero gradient
      for (int64_t c2 = 0; c2 < V; ++c2) {
        EXPECT_EQ(r.dz[static_cast<size_t>(1 * V + c2)], 0.0);
        EXPECT_EQ(r.dz[static_cast<size_t>(3 * V + c2)], 0.0);
      }
    }
  }
}

TEST(XentRows, AllPaddingGivesZeroLossAndGradient) {
  for (Backend b : {Backend::Reference64, Backend::Reference, Backend::Cpu}) {
    XentGraph c;
    build(c, {3, 4}, 0.1, false);
    const Result r = run(c, b, uniform(12, 2.0, 2), {-1, -100, -1});
    EXPECT_EQ(r.loss[0], 0.0) << backend_name(b);
    for (double d : r.dz) EXPECT_EQ(d, 0.0) << backend_name(b);
  }
}

TEST(XentRows, TargetOutOfRangeIsNaNNotARead) {
  for (Backend b : {Backend::Reference64, Backend::Cpu}) {
    XentGraph c;
    build(c, {2, 4}, 0.0, false);
    const Result r = run(c, b, uniform(8, 2.0, 3), {1, 4});
    EXPECT_TRUE(std::isnan(r.loss[0])) << backend_name(b);
    for (int k = 0; k < 4; ++k) {
      EXPECT_TRUE(std::isfinite(r.dz[static_cast<size_t>(k)])) << backend_name(b);
      EXPECT_TRUE(std::isnan(r.dz[static_cast<size_t>(4 + k)])) << backend_name(b);
    }
  }
}

// -------------------------------------------------------- gradient checks ----

namespace {

GradInput f32in(Shape s) {
  GradInput g;
  g.shape = std::move(s);
  return g;
}
GradInput target_in(Shape s, std::vector<double> v) {
  GradInput g;
  g.shape = std::move(s);
  g.dtype = DType::i32;
  g.differentiable = false;
  g.values = std::move(v);
  return g;
}

}  // namespace

TEST(XentRowsGradCheck, PaddingRows) {
  grad_check({f32in({5, 7}), target_in({5}, {2, -1, 0, 6, -100})},
             [](Builder& b, const std::vector<ValueId>& in) { return xent_rows(b, in[0], in[1]); });
}

TEST(XentRowsGradCheck, SmoothingAndPadding) {
  grad_check({f32in({6, 4}), target_in({6}, {3, -1, 0, 1, 2, -1})},
             [](Builder& b, const std::vector<ValueId>& in) { return xent_rows(b, in[0], in[1], 0.1); });
}

TEST(XentRowsGradCheck, LargeLogitsAfterLinearInPlace) {
  // Logits ~±20 from a layer: a transient value whose buffer the backward
  // writes dlogits into; the linear layer's parameters get gradients too.
  grad_check({f32in({4, 6}), target_in({4}, {4, -1, 0, 2})}, [](Builder& b, const std::vector<ValueId>& in) {
    ValueId z = b.g.add1("scale", {linear(b, in[0], 5)}, {{"alpha", 20.0}}, "scale");
    return xent_rows(b, z, in[1], 0.2);
  });
}

TEST(XentRowsGradCheck, TwoLeadingAxes) {
  grad_check({f32in({2, 3, 5}), target_in({2, 3}, {1, 4, -1, 0, -1, 3})},
             [](Builder& b, const std::vector<ValueId>& in) { return xent_rows(b, in[0], in[1], 0.05); });
}

// ------------------------------------------------- fast CPU vs reference ----

TEST(XentRows, CpuMatchesReferenceOnOddWidths) {
  struct Case {
    int64_t R, V;
    double scale;
  };
  for (const Case k : {Case{7, 1, 4.0}, Case{9, 17, 8.0}, Case{5, 50257, 8.0}, Case{3, 1000, 30.0}}) {
    for (double s : {0.0, 0.1}) {
      SCOPED_TRACE("R " + std::to_string(k.R) + " V " + std::to_string(k.V) + " smoothing " + std::to_string(s));
      const std::vector<double> z = uniform(static_cast<size_t>(k.R * k.V), k.scale, 10 + k.V);
      const std::vector<int32_t> t = targets(k.R, k.V, {1}, 20 + k.V);
      XentGraph c;
      build(c, {k.R, k.V}, s, false);
      const Result ref = run(c, Backend::Reference64, z, t, 1.5);
      const Result cpu = run(c, Backend::Cpu, z, t, 1.5);
      EXPECT_EQ(cpu.kernels[0], "cpu.xent_rows");
      EXPECT_EQ(cpu.kernels[1], "cpu.xent_rows_bwd");
      EXPECT_NEAR(cpu.loss[0], ref.loss[0], 1e-5 * (1 + std::abs(ref.loss[0])));
      expect_near_all("lse", cpu.lse, ref.lse, 1e-5, 1e-6);
      const double g = 1.5 / static_cast<double>(k.R - 1);
      std::vector<double> tol(ref.dz.size());
      int bad = 0;
      for (size_t i = 0; i < tol.size() && bad < 5; ++i) {
        const bool ok = std::abs(cpu.dz[i] - ref.dz[i]) <= 1e-5 * (std::abs(ref.dz[i]) + 2 * g);
        EXPECT_TRUE(ok) << "dz[" << i << "] = " << cpu.dz[i] << ", want " << ref.dz[i];
        bad += !ok;
      }
    }
  }
}

TEST(XentRows, CpuLossDoesNotDependOnTheThreadCount) {
  const int64_t R = 12, V = 50257;  // above the threading threshold
  const std::vector<double> z = uniform(static_cast<size_t>(R * V), 6.0, 5);
  const std::vector<int32_t> t = targets(R, V, {0, 7}, 6);
  XentGraph c;
  build(c, {R, V}, 0.1, false);
  const Result one = run(c, Backend::Cpu, z, t, 1.0, 1);
  for (int threads : {2, 3, 5}) {
    const Result many = run(c, Backend::Cpu, z, t, 1.0, threads);
    EXPECT_EQ(many.loss, one.loss) << threads << " threads";
    EXPECT_EQ(many.lse, one.lse) << threads << " threads";
    EXPECT_EQ(many.dz, one.dz) << threads << " threads";
  }
}

TEST(XentRows, InPlaceEqualsOutOfPlace) {
  const int64_t R = 6, V = 4099;
  const std::vector<double> z = uniform(static_cast<size_t>(R * V), 8.0, 7);
  const std::vector<int32_t> t = targets(R, V, {2}, 8);
  for (Backend b : {Backend::Cpu, Backend::Reference64}) {
    XentGraph in_place, kept;
    build(in_place, {R, V}, 0.1, true);
    build(kept, {R, V}, 0.1, true, /*keep_logits=*/true);
    const Result a = run(in_place, b, z, t), o = run(kept, b, z, t);
    EXPECT_TRUE(a.dz_over_logits) << backend_name(b) << ": the planner did not give the logits' buffer to dlogits";
    EXPECT_FALSE(o.dz_over_logits) << backend_name(b);
    EXPECT_EQ(a.loss, o.loss) << backend_name(b);
    EXPECT_EQ(a.dz, o.dz) << backend_name(b);
  }
}

// ---------------------------------------------------------------- PyTorch ----

TEST(XentRowsTorch, MatchesCrossEntropyIgnoreIndexLabelSmoothing) {
  const io::SafetensorsFile f =
      io::SafetensorsFile::load(std::string(MEMFIT_TEST_DATA) + "/golden/xent_rows.safetensors");
  auto f64 = [&](const std::string& n) {
    const io::TensorInfo& ti = f.at(n);
    EXPECT_EQ(ti.dtype, io::DType::F64) << n;
    std::vector<double> v(static_cast<size_t>(ti.numel()));
    std::memcpy(v.data(), f.data(ti), v.size() * sizeof(double));
    return v;
  };
  struct Case {
    const char* name;
    double smoothing;
  };
  for (const Case k : {Case{"plain", 0.0}, Case{"smooth", 0.1}, Case{"seq", 0.2}, Case{"wide", 0.05}}) {
    const std::string n = k.name;
    const io::TensorInfo& zi = f.at(n + ".logits");
    const Shape zs = zi.shape;
    const std::vector<double> z = f64(n + ".logits");
    const io::TensorInfo& ti = f.at(n + ".targets");
    ASSERT_EQ(ti.dtype, io::DType::I32) << n;
    std::vector<int32_t> t(static_cast<size_t>(ti.numel()));
    std::memcpy(t.data(), f.data(ti), t.size() * sizeof(int32_t));
    const std::vector<double> loss = f64(n + ".loss"), lse = f64(n + ".lse"), dz = f64(n + ".dlogits");
    int64_t count = 0;
    for (int32_t y : t) count += y >= 0;
    const double g = 1.0 / static_cast<double>(count);
    for (Backend b : {Backend::Reference64, Backend::Cpu}) {
      SCOPED_TRACE(n + " on " + backend_name(b));
      XentGraph c;
      build(c, zs, k.smoothing, false);
      const Result r = run(c, b, z, t);
      // Reference64: the same double arithmetic up to order (1e-12); Cpu: the
      // fast kernel's tolerances (top of the file).
      const bool d = b == Backend::Reference64;
      EXPECT_NEAR(r.loss[0], loss[0], (d ? 1e-12 : 1e-5) * (1 + std::abs(loss[0])));
      for (size_t i = 0; i < t.size(); ++i)
        if (t[i] >= 0) {
          EXPECT_NEAR(r.lse[i], lse[i], d ? 1e-12 : 1e-5 + 1e-6 * std::abs(lse[i])) << "lse[" << i << "]";
        }
      for (size_t i = 0; i < dz.size(); ++i)
        ASSERT_NEAR(r.dz[i], dz[i], (d ? 1e-12 : 1e-5) * (std::abs(dz[i]) + 2 * g)) << "dlogits[" << i << "]";
    }
  }
}

// ------------------------------------------------------------------- plan ----

namespace {

constexpr int64_t kVocab = 50257, kT = 8, kN = 2, kDim = 16, kRows = kN * kT;
constexpr size_t kRowsBytes = static_cast<size_t>(kRows * kVocab) * sizeof(float);  // one [R, V] f32 buffer

struct LmPlan {
  size_t transient = 0, peak = 0;
  int wide_blocks = 0;  // transient alias sets of at least [R, V] f32
  bool in_place = false;
  size_t max_scratch = 0;
  std::string max_scratch_op;
};

// embedding -> linear to V, T x N rows, the loss over the rows, backward
// and an SGD update: planned (nothing allocated) on the CPU.
LmPlan plan_lm(bool chunked) {
  Graph g;
  Builder b(g, true);
  const ValueId tokens = g.input("tokens", {kN, kT}, DType::i32);
  const ValueId tgt = g.input("targets", {kN, kT}, DType::i32);
  const ValueId h = embedding(b, tokens, kVocab, kDim, {.name = "wte"});
  const ValueId logits = linear(b, h, kVocab, {.name = "head"});
  const ValueId loss = chunked ? xent_rows(b, logits, tgt)
                               : softmax_xent(b, reshape(b, logits, {kRows, kVocab}), reshape(b, tgt, {kRows}));
  g.value(loss).is_output = true;
  g.value(loss).is_loss = true;
  build_backward(g, loss);
  append_optimizer(g, OptimizerConfig{});
  ExecConfig cfg;
  cfg.backend = Backend::Cpu;
  cfg.verify = true;
  cfg.defer_allocation = true;
  Executor ex(g, cfg);
  const Plan& p = ex.plan();
  LmPlan r;
  r.transient = p.arena_bytes[static_cast<size_t>(Arena::Transient)];
  r.peak = p.peak_live_bytes;
  for (size_t v = 0; v < g.num_values(); ++v) {
    const Placement& pl = p.values[v];
    if (pl.arena == Arena::Transient && pl.root == static_cast<ValueId>(v) && pl.bytes >= kRowsBytes) ++r.wide_blocks;
  }
  for (size_t k = 0; k < g.num_nodes(); ++k) {
    const Node& n = g.node(static_cast<NodeId>(k));
    if (p.scratch[k].bytes > r.max_scratch) {
      r.max_scratch = p.scratch[k].bytes;
      r.max_scratch_op = n.op;
    }
    if (n.op == "xent_rows_bwd")
      r.in_place = p.values[static_cast<size_t>(n.outputs[0])].root == p.values[static_cast<size_t>(logits)].root;
  }
  return r;
}

}  // namespace

TEST(XentRowsPlan, LmGraphHoldsOneRowsByVocabBuffer) {
  const LmPlan old_plan = plan_lm(false), new_plan = plan_lm(true);
  EXPECT_TRUE(new_plan.in_place) << "dlogits did not take the logits' buffer";
  EXPECT_EQ(new_plan.wide_blocks, 1) << "a second [R, V] buffer is planned";
  EXPECT_EQ(old_plan.wide_blocks, 2) << "softmax_xent: logits and probabilities";
  // The old plan holds logits and probabilities at once (2 [R, V] buffers,
  // 16 x 50257 x 4 = 3,216,448 bytes each); the new one one [R, V] buffer
  // (logits, then dlogits in their place) plus what lives beside it at its
  // peak, the head's backward: its weight-gradient scratch (10 KB here), h
  // [R, 16] and the rows' lse, so under 4 KB besides the scratch. The
  // saving is the probabilities less that: 3,205,184 bytes measured here
  // (200 KB a token of the 201 KB the probabilities took).
  const size_t beside = new_plan.max_scratch + 4096;
  EXPECT_GE(old_plan.transient, 2 * kRowsBytes);
  EXPECT_LE(new_plan.transient, kRowsBytes + beside)
      << "transient arena: softmax_xent " << old_plan.transient << " bytes, xent_rows " << new_plan.transient;
  EXPECT_GE(old_plan.transient - new_plan.transient, kRowsBytes - beside);
  EXPECT_GE(old_plan.peak - new_plan.peak, kRowsBytes - beside)
      << "peak live: softmax_xent " << old_plan.peak << " bytes, xent_rows " << new_plan.peak;
  RecordProperty("transient_softmax_xent", std::to_string(old_plan.transient));
  RecordProperty("transient_xent_rows", std::to_string(new_plan.transient));
  std::printf("largest scratch: %s %zu B (softmax_xent graph: %s %zu B)\n", new_plan.max_scratch_op.c_str(), new_plan.max_scratch, old_plan.max_scratch_op.c_str(), old_plan.max_scratch);
  std::printf("LM plan (N %lld, T %lld, V %lld): transient arena softmax_xent %zu B, xent_rows %zu B, saved %zu B\n",
              static_cast<long long>(kN), static_cast<long long>(kT), static_cast<long long>(kVocab), old_plan.transient,
              new_plan.transient, old_plan.transient - new_plan.transient);
}

TEST(XentRowsPlan, LanguageModelStepUsesItInPlace) {
  // The training step graph of a token model: xent_rows over [N, T, V], the
  // logits not kept (their buffer becomes dlogits).
  const auto m = memfit::testing::token_lm("tiny-lm", [](Builder& b, const models::Inputs& in, int64_t vocab) {
    return linear(b, embedding(b, in.at("tokens"), vocab, kDim, {.name = "wte"}), vocab, {.name = "head"});
  });
  train::StepSpec s;
  s.model = m->name;
  s.model_def = m;
  s.data = {{"tokens", DType::i32, {kT}, 0.0}, {"targets", DType::i32, {kT}, -1.0}};
  s.classes = kVocab;
  s.batch = kN;
  const auto sg = train::build_step_graph(s);
  int xent = 0, softmax = 0;
  for (const Node& n : sg->g.nodes()) {
    xent += n.op == "xent_rows";
    softmax += n.op == "softmax_xent";
  }
  EXPECT_EQ(xent, 1);
  EXPECT_EQ(softmax, 0);
  EXPECT_FALSE(sg->g.value(sg->logits).is_output);
  ExecConfig cfg;
  cfg.verify = true;
  cfg.defer_allocation = true;
  Executor ex(sg->g, cfg);
  int wide = 0;
  for (size_t v = 0; v < sg->g.num_values(); ++v) {
    const Placement& pl = ex.plan().values[v];
    wide += pl.arena == Arena::Transient && pl.root == static_cast<ValueId>(v) && pl.bytes >= kRowsBytes;
  }
  EXPECT_EQ(wide, 1);
}
