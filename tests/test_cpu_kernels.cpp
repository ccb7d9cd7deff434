// The fast CPU kernels (Backend::Cpu: oneDNN and hand-written) against the
// f32 reference kernels (the oracle), forward and backward, on small graphs of
// one or two ops and on whole training steps.
//
// Each case builds a graph, fills every data input with the same random values
// for both backends, runs it on Backend::Cpu (guard bytes after every planned
// buffer, checked afterwards) and on Backend::Reference, and compares outputs.
//
// Tolerance: an output that sums products (conv, linear, matmul, pooling,
// batch-norm reductions) may differ only by f32 rounding, which grows with the
// number of terms and their size, not with the result (which may cancel):
//   |cpu - ref| <= 1e-5 * sum over the reduction of |term|.
// 1e-5 is ~80 ulps of the terms' total: f32 accumulation in any order (blocked,
// threaded) stays far inside it for the reductions tested here (< 10^5 terms),
// while a wrong index or a missing term is off by a whole term. The magnitude
// sum|term| is obtained by running the reference on |inputs| for the ops that
// are linear in each input. Element-wise ops (relu, add, dropout, optimizer
// updates) perform the same few roundings in the same order as the reference:
// they are compared to 1e-6 of the magnitudes involved (FMA contraction may
// differ), masks and selections exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernel_cases.hpp"
#include "kernels/bf16.hpp"
#include "kernels/cpu/layout.hpp"
#include "ops/conv/ref.hpp"
#include "kernels/kernel.hpp"
#include "memfit/autodiff.hpp"
#include "memfit/builder.hpp"
#include "memfit/optim.hpp"
#include "memfit/rewrite.hpp"
#include "memfit/runtime.hpp"
#include "ops/batchnorm/cpu.hpp"
#include "ops/conv/cpu.hpp"
#include "ops/pool/cpu.hpp"
#include "runtime/device.hpp"
#include "runtime/kernel_table.hpp"
#include "runtime/lower_cpu/cpu_lowering.hpp"
#include "runtime/lower_cpu/layout.hpp"
#include "runtime/lowered.hpp"
#include "compile/step_graph.hpp"

using namespace memfit;
using memfit::testing::ConvCase;
using memfit::testing::conv_str;
using memfit::testing::to_blocked;
using memfit::testing::to_plain;

namespace {

constexpr double kRtol = 1e-5;    // reductions, relative to sum |term|
constexpr double kEltTol = 1e-6;  // element-wise ops, relative to the magnitudes involved

// Values fed to a graph: f32 and i32 data by value id.
struct Feed {
  std::map<ValueId, std::vector<float>> f32;
  std::map<ValueId, std::vector<int32_t>> i32;
};

// Random data for every input, parameter and buffer of the graph: uniform in
// [-1, 1] (positive for values listed in `positive`), labels in [0, classes).
Feed random_feed(const Graph& g, uint64_t seed, int32_t classes = 10, std::vector<ValueId> positive = {}) {
  Feed f;
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> U(-1.0f, 1.0f), P(0.5f, 1.5f);
  for (size_t v = 0; v < g.num_values(); ++v) {
    const Value& val = g.value(static_cast<ValueId>(v));
    if (val.cls != VClass::Input && val.cls != VClass::Param && val.cls != VClass::Buffer) continue;
    const size_t n = static_cast<size_t>(numel(val.shape));
    const bool pos = std::find(positive.begin(), positive.end(), static_cast<ValueId>(v)) != positive.end();
    if (val.dtype == DType::i32) {
      auto& d = f.i32[static_cast<ValueId>(v)];
      for (size_t i = 0; i < n; ++i) d.push_back(static_cast<int32_t>(gen() % static_cast<uint64_t>(classes)));
    } else if (val.dtype == DType::f32) {
      auto& d = f.f32[static_cast<ValueId>(v)];
      for (size_t i = 0; i < n; ++i) d.push_back(pos ? P(gen) : U(gen));
    }
  }
  return f;
}

Feed abs_feed(Feed f) {
  for (auto& [v, d] : f.f32)
    for (float& x : d) x = std::abs(x);
  return f;
}

struct Outputs {
  std::map<ValueId, std::vector<float>> f32;
  std::map<ValueId, std::vector<uint8_t>> u8;
};

// Runs the schedule node by node. Before each node the guard bytes after its
// transient outputs and its scratch are set; afterwards they must be intact,
// so a kernel that writes past its planned buffers fails the test. (Guards are
// set per node: a buffer's guard may legitimately be overwritten while the
// buffer is dead, by a value that shares its memory at another time.)
void run_guarded(Executor& ex, const kernels::StepContext& ctx) {
  const Plan& plan = ex.plan();
  const size_t gb = ex.config().plan.guard_bytes;
  auto* base = static_cast<uint8_t*>(ex.arena(Arena::Transient).ptr);
  const Graph& g = ex.graph();
  std::vector<size_t> guards;  // offsets of this node's guard regions
  for (size_t k = 0; k < g.num_nodes(); ++k) {
    guards.clear();
    for (ValueId v : g.node(static_cast<NodeId>(k)).outputs) {
      const Placement& r = plan.values[static_cast<size_t>(plan.values[static_cast<size_t>(v)].root)];
      if (r.arena == Arena::Transient && r.bytes) guards.push_back(r.offset + r.bytes);
    }
    if (plan.scratch[k].bytes) guards.push_back(plan.scratch[k].offset + plan.scratch[k].bytes);
    if (gb && base)
      for (size_t off : guards) std::memset(base + off, 0xA5, gb);
    ex.run_nodes(k, k + 1, ctx);
    if (!gb || !base) continue;
    for (size_t off : guards)
      for (size_t i = 0; i < gb; ++i)
        if (base[off + i] != 0xA5) {
          ADD_FAILURE() << backend_name(ex.config().backend) << " node " << k << " ("
                        << g.node(static_cast<NodeId>(k)).op << ") wrote past a planned buffer";
          return;
        }
  }
}

kernels::StepContext default_ctx() {
  kernels::StepContext ctx;
  ctx.seed = 1234;
  ctx.step = 3;
  ctx.lr = 0.05;
  return ctx;
}

// Runs the graph `steps` times (ctx.step advancing) on one backend and reads
// the listed values back.
Outputs run_on(const Graph& g, Backend b, const Feed& feed, const std::vector<ValueId>& read, int steps = 1,
               kernels::StepContext ctx = default_ctx()) {
  ExecConfig cfg;
  cfg.backend = b;
  cfg.verify = true;
  cfg.plan.guard_bytes = 64;
  Executor ex(g, cfg);
  ex.init_params(7);
  for (auto& [v, d] : feed.f32) ex.write_f32(v, d.data());
  for (auto& [v, d] : feed.i32) std::memcpy(ex.data(v), d.data(), d.size() * sizeof(int32_t));
  for (int s = 0; s < steps; ++s) {
    run_guarded(ex, ctx);
    ++ctx.step;
  }
  Outputs o;
  for (ValueId v : read) {
    const Value& val = g.value(v);
    const size_t n = static_cast<size_t>(numel(val.shape));
    if (val.dtype == DType::u8) {
      const auto* p = ex.ptr<uint8_t>(v);
      o.u8[v].assign(p, p + n);
    } else {
      o.f32[v].resize(n);
      ex.read_f32(v, o.f32[v].data());
    }
  }
  return o;
}

// |a - b| <= tol[i] for every element (tol: per-element bound), both finite.
void expect_close(const std::string& what, const std::vector<float>& cpu, const std::vector<float>& ref,
                  const std::vector<double>& tol) {
  ASSERT_EQ(cpu.size(), ref.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double d = std::abs(static_cast<double>(cpu[i]) - static_cast<double>(ref[i]));
    if (!std::isfinite(cpu[i]) || !(d <= tol[i])) {
      if (++bad <= 5)
        ADD_FAILURE() << what << "[" << i << "]: cpu " << cpu[i] << " ref " << ref[i] << " diff " << d << " > tol "
                      << tol[i];
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << cpu.size() << " elements differ";
}

std::vector<double> scaled(const std::vector<float>& mag, double rtol) {
  std::vector<double> t(mag.size());
  for (size_t i = 0; i < mag.size(); ++i) t[i] = rtol * std::abs(static_cast<double>(mag[i]));
  return t;
}

// The kernel Backend::Cpu makes for the first node running `op`.
std::string cpu_kernel_name(const Graph& g, const std::string& op) {
  for (const Node& n : g.nodes())
    if (n.op == op) {
      auto k = make_kernel(g, n, Backend::Cpu);
      return k ? k->name() : "(none)";
    }
  return std::string("(no node ").append(op).append(")");
}

void expect_kernel(const Graph& g, const std::string& op, const std::string& name) {
  EXPECT_EQ(cpu_kernel_name(g, op), name) << "Cpu lowering of " << op;
}

// For graphs whose outputs are linear in each input (conv, linear, matmul,
// avg pooling): compares Cpu with Reference, tolerance kRtol times the
// reference run on |inputs| (= sum over the reduction of |term|).
void compare_multilinear(const Graph& g, const std::vector<ValueId>& outs, uint64_t seed) {
  Feed f = random_feed(g, seed);
  Outputs cpu = run_on(g, Backend::Cpu, f, outs);
  Outputs ref = run_on(g, Backend::Reference, f, outs);
  Outputs mag = run_on(g, Backend::Reference, abs_feed(f), outs);
  for (ValueId v : outs) expect_close(g.value(v).name, cpu.f32[v], ref.f32[v], scaled(mag.f32[v], kRtol));
}

void mark_outputs(Graph& g, const std::vector<ValueId>& vs) {
  for (ValueId v : vs) g.value(v).is_output = true;
}

// ---------------------------------------------------------------- conv2d


Attrs conv_attrs(const ConvCase& c) {
  return {{"stride", Shape{c.stride, c.stride}},
          {"pad", Shape{c.pad, c.pad}},
          {"dilation", Shape{c.dil, c.dil}},
          {"groups", c.groups}};
}

Shape conv_out(const ConvCase& c) {
  auto o = [&](int64_t in, int64_t k) { return (in + 2 * c.pad - c.dil * (k - 1) - 1) / c.stride + 1; };
  return {c.N, c.K, o(c.H, c.R), o(c.W, c.S)};
}

const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> cases = {
      {1, 3, 7, 9, 4, 3, 3, 1, 1},                                    // odd sizes, batch 1
      {3, 4, 9, 7, 6, 3, 3, 2, 1, 1, 1, false},                       // stride 2, batch 3, no bias
      {2, 3, 11, 10, 5, 3, 3, 1, 2, 2},                               // dilation 2
      {2, 4, 8, 8, 6, 3, 3, 1, 1, 1, 2},                              // groups 2
      {2, 8, 9, 9, 8, 3, 3, 2, 1, 1, 8},                              // depthwise, stride 2
      {3, 16, 5, 5, 32, 1, 1},                                        // 1x1
      {2, 1, 28, 28, 8, 5, 5, 1, 2},                                  // ConvNet conv1
      {2, 32, 14, 14, 64, 5, 5, 1, 2},                                // ConvNet conv2
      {2, 16, 8, 8, 32, 1, 1, 2, 0, 1, 1, false},                     // ResNet downsample 1x1 stride 2
      {1, 5, 6, 13, 7, 3, 5, 1, 0, 1, 1},                             // non-square kernel
  };
  return cases;
}

TEST(CpuKernels, Conv2dForward) {
  for (const ConvCase& c : conv_cases()) {
    SCOPED_TRACE(conv_str(c));
    Graph g;
    ValueId x = g.input("x", {c.N, c.C, c.H, c.W});
    ValueId w = g.input("w", {c.K, c.C / c.groups, c.R, c.S});
    std::vector<ValueId> ins{x, w};
    if (c.bias) ins.push_back(g.input("b", {c.K}));
    ValueId y = g.add1("conv2d", ins, conv_attrs(c), "conv");
    ASSERT_EQ(g.value(y).shape, conv_out(c));
    mark_outputs(g, {y});
    expect_kernel(g, "conv2d", "dnnl.conv2d");
    compare_multilinear(g, {y}, 11);
  }
}

TEST(CpuKernels, Conv2dBackwardData) {
  for (const ConvCase& c : conv_cases()) {
    SCOPED_TRACE(conv_str(c));
    Graph g;
    ValueId dy = g.input("dy", conv_out(c));
    ValueId w = g.input("w", {c.K, c.C / c.groups, c.R, c.S});
    Attrs a = conv_attrs(c);
    a.set("x_shape", Shape{c.N, c.C, c.H, c.W});
    ValueId dx = g.add1("conv2d_bwd_data", {dy, w}, a, "conv");
    mark_outputs(g, {dx});
    expect_kernel(g, "conv2d_bwd_data", "dnnl.conv2d_bwd_data");
    compare_multilinear(g, {dx}, 12);
  }
}

TEST(CpuKernels, Conv2dBackwardWeight) {
  for (const ConvCase& c : conv_cases()) {
    SCOPED_TRACE(conv_str(c));
    Graph g;
    ValueId x = g.input("x", {c.N, c.C, c.H, c.W});
    ValueId dy = g.input("dy", conv_out(c));
    Attrs a = conv_attrs(c);
    a.set("w_shape", Shape{c.K, c.C / c.groups, c.R, c.S});
    a.set("bias", int64_t(c.bias));
    auto outs = g.add_node("conv2d_bwd_weight", {x, dy}, a, "conv");
    ASSERT_EQ(outs.size(), c.bias ? 2u : 1u);
    mark_outputs(g, outs);
    // Up to 3 input channels where oneDNN has no AVX-512 kernels (x and dy
    // plain here): memfit's own kernel.
    kernels::ConvParams p{c.N, c.C, c.H, c.W, c.K, c.R, c.S, conv_out(c)[2], conv_out(c)[3]};
    p.stride_h = p.stride_w = c.stride;
    p.pad_h = p.pad_w = c.pad;
    p.dil_h = p.dil_w = c.dil;
    p.groups = c.groups;
    expect_kernel(g, "conv2d_bwd_weight",
                  kernels::cpu::few_taps_preferred(p) ? "cpu.conv2d_bwd_weight_taps" : "dnnl.conv2d_bwd_weight");
    compare_multilinear(g, outs, 13);
  }
}

// ---------------------------------------------------------------- linear, matmul

struct LinearCase {
  Shape x;  // [..., K]
  int64_t N;
  bool bias;
};

const std::vector<LinearCase>& linear_cases() {
  static const std::vector<LinearCase> cases = {
      {{5, 7}, 3, true},       {{2, 3, 4}, 6, false},  // 3-d input: M = 6
      {{1, 9}, 5, true},       {{64, 3136}, 1024, true},  // ConvNet fc1
      {{64, 1024}, 10, true},  {{17, 33}, 1, false},
  };
  return cases;
}

TEST(CpuKernels, LinearForward) {
  for (const LinearCase& c : linear_cases()) {
    SCOPED_TRACE(shape_str(c.x) + " -> " + std::to_string(c.N));
    Graph g;
    ValueId x = g.input("x", c.x);
    std::vector<ValueId> ins{x, g.input("w", {c.N, c.x.back()})};
    if (c.bias) ins.push_back(g.input("b", {c.N}));
    ValueId y = g.add1("linear", ins, {}, "fc");
    mark_outputs(g, {y});
    expect_kernel(g, "linear", "dnnl.linear");
    compare_multilinear(g, {y}, 21);
  }
}

TEST(CpuKernels, LinearBackward) {
  for (const LinearCase& c : linear_cases()) {
    SCOPED_TRACE(shape_str(c.x) + " -> " + std::to_string(c.N));
    Shape ys = c.x;
    ys.back() = c.N;
    {
      Graph g;
      ValueId dy = g.input("dy", ys);
      ValueId w = g.input("w", {c.N, c.x.back()});
      ValueId dx = g.add1("linear_bwd_data", {dy, w}, {}, "fc");
      EXPECT_EQ(g.value(dx).shape, c.x);
      mark_outputs(g, {dx});
      expect_kernel(g, "linear_bwd_data", "dnnl.linear_bwd_data");
      compare_multilinear(g, {dx}, 22);
    }
    {
      Graph g;
      ValueId x = g.input("x", c.x);
      ValueId dy = g.input("dy", ys);
      auto outs = g.add_node("linear_bwd_weight", {x, dy}, {{"bias", int64_t(c.bias)}}, "fc");
      mark_outputs(g, outs);
      expect_kernel(g, "linear_bwd_weight", "dnnl.linear_bwd_weight");
      compare_multilinear(g, outs, 23);
    }
  }
}

TEST(CpuKernels, Matmul) {
  struct Case {
    Shape a, b;
    bool ta, tb;
  };
  const std::vector<Case> cases = {
      {{3, 5, 7}, {3, 7, 4}, false, false}, {{3, 7, 5}, {3, 7, 4}, true, false},
      {{3, 5, 7}, {3, 4, 7}, false, true},  {{3, 7, 5}, {3, 4, 7}, true, true},
      {{2, 3, 5, 7}, {7, 4}, false, false},  // b broadcast over a 2-axis batch
      {{4, 6, 9}, {5, 9}, false, true},      // b broadcast, transposed
      {{5, 7}, {7, 4}, false, false},        // plain 2-d
      {{2, 64, 32}, {2, 64, 48}, true, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.a) + (c.ta ? "^T" : "") + " x " + shape_str(c.b) + (c.tb ? "^T" : ""));
    Graph g;
    ValueId a = g.input("a", c.a);
    ValueId b = g.input("b", c.b);
    ValueId y = g.add1("matmul", {a, b}, {{"trans_a", int64_t(c.ta)}, {"trans_b", int64_t(c.tb)}}, "mm");
    mark_outputs(g, {y});
    expect_kernel(g, "matmul", "dnnl.matmul");
    compare_multilinear(g, {y}, 31);
  }
}

// ---------------------------------------------------------------- pooling

struct PoolCase {
  int64_t N, C, H, W, R, S, sh, sw, ph, pw;
  bool include_pad = true;
};

Attrs pool_attrs(const PoolCase& c) {
  return {{"kernel", Shape{c.R, c.S}},
          {"stride", Shape{c.sh, c.sw}},
          {"pad", Shape{c.ph, c.pw}},
          {"count_include_pad", int64_t(c.include_pad)}};
}

std::string pool_str(const PoolCase& c) {
  std::ostringstream o;
  o << "N" << c.N << " C" << c.C << " " << c.H << "x" << c.W << " win " << c.R << "x" << c.S << " s" << c.sh << ","
    << c.sw << " p" << c.ph << "," << c.pw << (c.include_pad ? " incl" : " excl");
  return o.str();
}

Shape pool_out(const PoolCase& c) {
  return {c.N, c.C, (c.H + 2 * c.ph - c.R) / c.sh + 1, (c.W + 2 * c.pw - c.S) / c.sw + 1};
}

const std::vector<PoolCase>& pool_cases() {
  static const std::vector<PoolCase> cases = {
      {2, 3, 28, 28, 2, 2, 2, 2, 0, 0},        // ConvNet
      {1, 2, 7, 9, 2, 2, 2, 2, 0, 0},          // odd sizes: last row/column unused
      {3, 4, 8, 8, 3, 3, 2, 2, 1, 1},          // padded, overlapping
      {2, 3, 7, 9, 3, 3, 1, 1, 1, 1},          // stride 1, heavy overlap
      {2, 2, 9, 10, 2, 3, 2, 1, 1, 1},         // non-square window and stride
      {2, 3, 7, 9, 3, 3, 2, 2, 1, 1, false},   // exclude padding (avg)
  };
  return cases;
}

// Max pooling: y must equal the reference exactly (a selection); dx adds dy
// over the windows that selected each element: at most ceil(R/s) ceil(S/s)
// terms of |dy| <= 1. 2x2 windows at stride 2 without padding run memfit's
// own pair (ops/pool/cpu.cpp), the others oneDNN's.
// A max pooling and its backward: x -> y (and its index) -> dx from dy.
struct MaxPoolGraph {
  Graph g;
  ValueId x, y, dx;
};
void build_max_pool(MaxPoolGraph& m, const PoolCase& c) {
  Graph& g = m.g;
  m.x = g.input("x", {c.N, c.C, c.H, c.W});
  auto outs = g.add_node("max_pool2d", {m.x}, pool_attrs(c), "pool");
  m.y = outs[0];
  ValueId dy = g.input("dy", g.value(outs[0]).shape);
  Attrs a = pool_attrs(c);
  a.set("x_shape", Shape{c.N, c.C, c.H, c.W});
  m.dx = g.add1("max_pool2d_bwd", {dy, outs[1]}, a, "pool", Phase::Backward);
  mark_outputs(g, {m.y, m.dx});
}

TEST(CpuKernels, MaxPool) {
  for (const PoolCase& c : pool_cases()) {
    SCOPED_TRACE(pool_str(c));
    MaxPoolGraph m;
    build_max_pool(m, c);
    const Graph& g = m.g;
    const ValueId dx = m.dx;
    const std::vector<ValueId> outs{m.y};
    const bool own = c.R == 2 && c.S == 2 && c.sh == 2 && c.sw == 2 && c.ph == 0 && c.pw == 0;
    expect_kernel(g, "max_pool2d", own ? "cpu.max_pool2x2" : "dnnl.max_pool2d");
    expect_kernel(g, "max_pool2d_bwd", own ? "cpu.max_pool2x2_bwd" : "dnnl.max_pool2d_bwd");
    Feed f = random_feed(g, 41);
    Outputs cpu = run_on(g, Backend::Cpu, f, {outs[0], dx});
    Outputs ref = run_on(g, Backend::Reference, f, {outs[0], dx});
    EXPECT_EQ(cpu.f32[outs[0]], ref.f32[outs[0]]);
    const double terms = std::ceil(double(c.R) / c.sh) * std::ceil(double(c.S) / c.sw);
    expect_close("dx", cpu.f32[dx], ref.f32[dx], std::vector<double>(cpu.f32[dx].size(), kRtol * terms));
  }
}

// The own 2x2 pair selects as the reference does where values tie (the
// window's first maximum in row-major order) and where NaNs are (a NaN
// wins, the last of a window): y and dx equal the reference's to the bit,
// the ConvNet's size and odd sizes whose last row and column no window
// covers (their dx is 0).
TEST(CpuKernels, MaxPool2x2TiesAndNaNsAreTheReferences) {
  for (const PoolCase& c : {PoolCase{2, 3, 28, 28, 2, 2, 2, 2, 0, 0}, PoolCase{1, 2, 7, 9, 2, 2, 2, 2, 0, 0}}) {
    SCOPED_TRACE(pool_str(c));
    MaxPoolGraph m;
    build_max_pool(m, c);
    const Graph& g = m.g;
    const ValueId x = m.x, dx = m.dx;
    const std::vector<ValueId> outs{m.y};
    expect_kernel(g, "max_pool2d", "cpu.max_pool2x2");
    Feed f = random_feed(g, 47);
    // Three values only (many windows tie), a NaN in every 13th place.
    std::vector<float>& xs = f.f32[x];
    for (size_t i = 0; i < xs.size(); ++i)
      xs[i] = i % 13 == 5 ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>((i * 7) % 3);
    Outputs cpu = run_on(g, Backend::Cpu, f, {outs[0], dx});
    Outputs ref = run_on(g, Backend::Reference, f, {outs[0], dx});
    for (ValueId v : {outs[0], dx}) {
      ASSERT_EQ(cpu.f32[v].size(), ref.f32[v].size());
      EXPECT_EQ(std::memcmp(cpu.f32[v].data(), ref.f32[v].data(), cpu.f32[v].size() * sizeof(float)), 0)
          << (v == dx ? "dx" : "y") << " differs from the reference";
    }
  }
}

// Max pooling in ceil mode (PyTorch's ceil_mode=True, GoogLeNet's and
// SqueezeNet's pools): the last, partial window of each axis is pooled
// over what it covers; the sizes are PyTorch's, and the fast kernel equals
// the reference as in MaxPool.
TEST(CpuKernels, MaxPoolCeilMode) {
  struct Case {
    PoolCase p;
    int64_t oh, ow;  // torch.nn.functional.max_pool2d(..., ceil_mode=True) sizes
  };
  for (const Case& c : std::vector<Case>{{{2, 3, 32, 32, 3, 3, 2, 2, 0, 0}, 16, 16},    // GoogLeNet at 64: floor 15
                                         {{2, 4, 14, 13, 3, 3, 2, 2, 0, 0}, 7, 6},      // SqueezeNet's: floor 6, 6
                                         {{1, 2, 8, 9, 3, 3, 2, 2, 1, 1}, 5, 5},        // padded: floor 4, 5
                                         {{1, 2, 5, 7, 2, 2, 2, 3, 1, 1}, 3, 3}}) {     // the last window would start in the padding: dropped
    SCOPED_TRACE(pool_str(c.p));
    Graph g;
    ValueId x = g.input("x", {c.p.N, c.p.C, c.p.H, c.p.W});
    Attrs a = pool_attrs(c.p);
    a.set("ceil", int64_t(1));
    auto outs = g.add_node("max_pool2d", {x}, a, "pool");
    EXPECT_EQ(g.value(outs[0]).shape, (Shape{c.p.N, c.p.C, c.oh, c.ow}));
    ValueId dy = g.input("dy", g.value(outs[0]).shape);
    a.set("x_shape", Shape{c.p.N, c.p.C, c.p.H, c.p.W});
    ValueId dx = g.add1("max_pool2d_bwd", {dy, outs[1]}, a, "pool", Phase::Backward);
    mark_outputs(g, {outs[0], dx});
    expect_kernel(g, "max_pool2d", "dnnl.max_pool2d");
    Feed f = random_feed(g, 43);
    Outputs cpu = run_on(g, Backend::Cpu, f, {outs[0], dx});
    Outputs ref = run_on(g, Backend::Reference, f, {outs[0], dx});
    EXPECT_EQ(cpu.f32[outs[0]], ref.f32[outs[0]]);
    const double terms = std::ceil(double(c.p.R) / c.p.sh) * std::ceil(double(c.p.S) / c.p.sw);
    expect_close("dx", cpu.f32[dx], ref.f32[dx], std::vector<double>(cpu.f32[dx].size(), kRtol * terms));
  }
  // Average pooling has no ceil mode.
  Graph g;
  ValueId x = g.input("x", {1, 1, 5, 5});
  Attrs a = pool_attrs({1, 1, 5, 5, 2, 2, 2, 2, 0, 0});
  a.set("ceil", int64_t(1));
  EXPECT_THROW(g.add_node("avg_pool2d", {x}, a, "pool"), GraphError);
}

TEST(CpuKernels, AvgPool) {
  for (const PoolCase& c : pool_cases()) {
    SCOPED_TRACE(pool_str(c));
    {
      Graph g;
      ValueId x = g.input("x", {c.N, c.C, c.H, c.W});
      ValueId y = g.add1("avg_pool2d", {x}, pool_attrs(c), "pool");
      mark_outputs(g, {y});
      expect_kernel(g, "avg_pool2d", "dnnl.avg_pool2d");
      compare_multilinear(g, {y}, 42);
    }
    {
      Graph g;
      ValueId dy = g.input("dy", pool_out(c));
      Attrs a = pool_attrs(c);
      a.set("x_shape", Shape{c.N, c.C, c.H, c.W});
      ValueId dx = g.add1("avg_pool2d_bwd", {dy}, a, "pool");
      mark_outputs(g, {dx});
      expect_kernel(g, "avg_pool2d_bwd", "dnnl.avg_pool2d_bwd");
      compare_multilinear(g, {dx}, 43);
    }
  }
}

TEST(CpuKernels, GlobalAvgPool) {
  for (Shape xs : {Shape{2, 3, 7, 9}, Shape{64, 512, 4, 4}, Shape{1, 5, 1, 1}}) {
    SCOPED_TRACE(shape_str(xs));
    {
      Graph g;
      ValueId y = g.add1("global_avg_pool", {g.input("x", xs)}, {}, "gap");
      mark_outputs(g, {y});
      expect_kernel(g, "global_avg_pool", "cpu.global_avg_pool");
      compare_multilinear(g, {y}, 44);
    }
    {
      Graph g;
      ValueId dx = g.add1("global_avg_pool_bwd", {g.input("dy", {xs[0], xs[1]})}, {{"x_shape", xs}}, "gap");
      mark_outputs(g, {dx});
      expect_kernel(g, "global_avg_pool_bwd", "cpu.global_avg_pool_bwd");
      compare_multilinear(g, {dx}, 45);
    }
  }
}

// ---------------------------------------------------------------- batch norm

// Per-channel statistics of x viewed as [N, C, HW], in double.
struct ChannelStats {
  std::vector<double> mean, var, abs_mean;
};
ChannelStats channel_stats(const std::vector<float>& x, int64_t N, int64_t C, int64_t HW) {
  ChannelStats s{std::vector<double>(C), std::vector<double>(C), std::vector<double>(C)};
  const double n = static_cast<double>(N * HW);
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0, asum = 0, ss = 0;
    for (int64_t b = 0; b < N; ++b)
      for (int64_t i = 0; i < HW; ++i) {
        sum += x[(b * C + c) * HW + i];
        asum += std::abs(x[(b * C + c) * HW + i]);
      }
    s.mean[c] = sum / n;
    s.abs_mean[c] = asum / n;
    for (int64_t b = 0; b < N; ++b)
      for (int64_t i = 0; i < HW; ++i) ss += std::pow(x[(b * C + c) * HW + i] - s.mean[c], 2);
    s.var[c] = ss / n;
  }
  return s;
}

// Tolerances (in the reduction sense): mean: kRtol mean|x|; var: kRtol (var +
// mean^2 + mean|x|^2); y: each value is (x - mean) gamma / std + beta with the
// statistics within the tolerances above, so kRtol (|x - mean| + mean|x|)
// |gamma| / std + |beta|, plus the relative error of 1/std.
TEST(CpuKernels, BatchNormForward) {
  for (Shape xs : {Shape{3, 5, 7, 9}, Shape{4, 6}, Shape{64, 32, 14, 14}}) {
    for (int training : {1, 0}) {
      SCOPED_TRACE(shape_str(xs) + (training ? " training" : " eval"));
      Graph g;
      const int64_t N = xs[0], C = xs[1], HW = numel(xs) / (N * C);
      ValueId x = g.input("x", xs);
      ValueId gamma = g.param("bn.weight", {C});
      ValueId beta = g.param("bn.bias", {C});
      ValueId rm = g.buffer("bn.running_mean", {C});
      ValueId rv = g.buffer("bn.running_var", {C});
      auto outs = g.add_node("batch_norm", {x, gamma, beta, rm, rv},
                             {{"eps", 1e-5}, {"momentum", 0.1}, {"training", int64_t(training)}}, "bn");
      mark_outputs(g, outs);
      expect_kernel(g, "batch_norm", "cpu.batch_norm");
      Feed f = random_feed(g, 51, 10, {rv});
      // Shift the data off zero so the mean matters.
      for (float& v : f.f32[x]) v = 0.5f + 2.0f * v;
      std::vector<ValueId> read = {outs[0], outs[1], outs[2], rm, rv};
      Outputs cpu = run_on(g, Backend::Cpu, f, read);
      Outputs ref = run_on(g, Backend::Reference, f, read);
      ChannelStats st = channel_stats(f.f32[x], N, C, HW);
      const auto& gam = f.f32[gamma];
      const auto& bet = f.f32[beta];
      std::vector<double> tm(C), tv(C), trm(C), trv(C), ty(static_cast<size_t>(numel(xs)));
      for (int64_t c = 0; c < C; ++c) {
        const double mean = training ? st.mean[c] : f.f32[rm][c];
        const double var = training ? st.var[c] : f.f32[rv][c];
        tm[c] = kRtol * st.abs_mean[c];
        tv[c] = kRtol * (var + mean * mean + st.abs_mean[c] * st.abs_mean[c]);
        trm[c] = kRtol * (std::abs(f.f32[rm][c]) + st.abs_mean[c]);
        trv[c] = kRtol * (std::abs(f.f32[rv][c]) + tv[c] / kRtol);
        const double inv = 1.0 / std::sqrt(var + 1e-5);
        for (int64_t b = 0; b < N; ++b)
          for (int64_t i = 0; i < HW; ++i) {
            const size_t k = static_cast<size_t>((b * C + c) * HW + i);
            const double xm = std::abs(f.f32[x][k] - mean) + st.abs_mean[c];
            ty[k] = kRtol * (xm * std::abs(gam[c]) * inv * (1.0 + tv[c] * inv * inv) + std::abs(bet[c]));
          }
      }
      expect_close("y", cpu.f32[outs[0]], ref.f32[outs[0]], ty);
      expect_close("mean", cpu.f32[outs[1]], ref.f32[outs[1]], tm);
      expect_close("var", cpu.f32[outs[2]], ref.f32[outs[2]], tv);
      expect_close("running_mean", cpu.f32[rm], ref.f32[rm], trm);
      expect_close("running_var", cpu.f32[rv], ref.f32[rv], trv);
    }
  }
}

// dbeta = sum dy: kRtol sum|dy|; dgamma = sum dy xhat: kRtol sum|dy xhat|;
// dx = gamma/std (dy - dbeta/n - xhat dgamma/n): kRtol |gamma|/std (|dy| +
// sum|dy|/n + |xhat| sum|dy xhat|/n).
TEST(CpuKernels, BatchNormBackward) {
  for (Shape xs : {Shape{3, 5, 7, 9}, Shape{4, 6}, Shape{64, 32, 14, 14}}) {
    for (int training : {1, 0}) {
      SCOPED_TRACE(shape_str(xs) + (training ? " training" : " eval"));
      Graph g;
      const int64_t N = xs[0], C = xs[1], HW = numel(xs) / (N * C);
      ValueId x = g.input("x", xs);
      ValueId dy = g.input("dy", xs);
      ValueId gamma = g.input("gamma", {C});
      ValueId mean = g.input("mean", {C});
      ValueId var = g.input("var", {C});
      auto outs = g.add_node("batch_norm_bwd", {x, dy, gamma, mean, var},
                             {{"eps", 1e-5}, {"momentum", 0.1}, {"training", int64_t(training)}}, "bn");
      mark_outputs(g, outs);
      expect_kernel(g, "batch_norm_bwd", "cpu.batch_norm_bwd");
      Feed f = random_feed(g, 52, 10, {var});
      // The statistics the forward would have produced for x.
      ChannelStats st = channel_stats(f.f32[x], N, C, HW);
      for (int64_t c = 0; c < C; ++c) {
        f.f32[mean][c] = static_cast<float>(st.mean[c]);
        f.f32[var][c] = static_cast<float>(st.var[c]);
      }
      Outputs cpu = run_on(g, Backend::Cpu, f, outs);
      Outputs ref = run_on(g, Backend::Reference, f, outs);
      const double n = static_cast<double>(N * HW);
      std::vector<double> tdx(static_cast<size_t>(numel(xs))), tdg(C), tdb(C);
      for (int64_t c = 0; c < C; ++c) {
        const double inv = 1.0 / std::sqrt(f.f32[var][c] + 1e-5);
        double sdy = 0, sdyx = 0;
        for (int64_t b = 0; b < N; ++b)
          for (int64_t i = 0; i < HW; ++i) {
            const size_t k = static_cast<size_t>((b * C + c) * HW + i);
            sdy += std::abs(f.f32[dy][k]);
            sdyx += std::abs(f.f32[dy][k] * (f.f32[x][k] - f.f32[mean][c]) * inv);
          }
        tdb[c] = kRtol * sdy;
        tdg[c] = kRtol * sdyx;
        for (int64_t b = 0; b < N; ++b)
          for (int64_t i = 0; i < HW; ++i) {
            const size_t k = static_cast<size_t>((b * C + c) * HW + i);
            const double xhat = std::abs((f.f32[x][k] - f.f32[mean][c]) * inv);
            tdx[k] = kRtol * std::abs(f.f32[gamma][c]) * inv * (std::abs(f.f32[dy][k]) + sdy / n + xhat * sdyx / n);
          }
      }
      expect_close("dx", cpu.f32[outs[0]], ref.f32[outs[0]], tdx);
      expect_close("dgamma", cpu.f32[outs[1]], ref.f32[outs[1]], tdg);
      expect_close("dbeta", cpu.f32[outs[2]], ref.f32[outs[2]], tdb);
    }
  }
}

// ---------------------------------------------------------------- element-wise

// Compares element-wise results to kEltTol of the magnitudes involved.
void compare_eltwise(const Graph& g, const std::vector<ValueId>& outs, uint64_t seed) {
  Feed f = random_feed(g, seed);
  Outputs cpu = run_on(g, Backend::Cpu, f, outs);
  Outputs ref = run_on(g, Backend::Reference, f, outs);
  for (ValueId v : outs) {
    if (g.value(v).dtype == DType::u8) {
      EXPECT_EQ(cpu.u8[v], ref.u8[v]) << g.value(v).name;
      continue;
    }
    std::vector<double> tol(ref.f32[v].size());
    for (size_t i = 0; i < tol.size(); ++i) tol[i] = kEltTol * (std::abs(ref.f32[v][i]) + 1e-30);
    expect_close(g.value(v).name, cpu.f32[v], ref.f32[v], tol);
  }
}

TEST(CpuKernels, EltwiseOps) {
  for (int64_t n : {int64_t(1000), int64_t(100003)}) {
    SCOPED_TRACE(std::string("n = ").append(std::to_string(n)));
    {
      Graph g;
      ValueId y = g.add1("relu", {g.input("x", {n})}, {}, "relu");
      mark_outputs(g, {y});
      expect_kernel(g, "relu", "dnnl.relu");
      compare_eltwise(g, {y}, 61);
    }
    {
      Graph g;
      ValueId dx = g.add1("relu_bwd", {g.input("y", {n}), g.input("dy", {n})}, {}, "relu");
      mark_outputs(g, {dx});
      expect_kernel(g, "relu_bwd", "cpu.relu_bwd");
      compare_eltwise(g, {dx}, 62);
    }
    {
      Graph g;
      ValueId y = g.add1("add", {g.input("a", {n}), g.input("b", {n})}, {}, "add");
      mark_outputs(g, {y});
      expect_kernel(g, "add", "cpu.add");
      compare_eltwise(g, {y}, 63);
    }
    {
      Graph g;
      ValueId y = g.add1("scale", {g.input("x", {n})}, {{"alpha", 0.37}}, "scale");
      mark_outputs(g, {y});
      expect_kernel(g, "scale", "cpu.scale");
      compare_eltwise(g, {y}, 64);
    }
    {
      Graph g;
      ValueId y = g.add1("fill", {}, {{"shape", Shape{n}}, {"value", 1.25}}, "fill");
      mark_outputs(g, {y});
      expect_kernel(g, "fill", "cpu.fill");
      compare_eltwise(g, {y}, 65);
    }
  }
}

// relu then relu_bwd in place (the planner lets y overwrite x and dx
// overwrite dy), inside a graph whose buffers are reused.
TEST(CpuKernels, ReluInPlaceChain) {
  Graph g;
  Builder b(g);
  ValueId x = g.input("x", {8, 37});
  ValueId h = linear(b, x, 53, {.name = "fc1"});
  h = relu(b, h);
  h = relu(b, linear(b, h, 41, {.name = "fc2"}));
  ValueId y = linear(b, h, 5, {.name = "fc3"});
  ValueId labels = g.input("labels", {8}, DType::i32);
  ValueId loss = softmax_xent(b, y, labels);
  g.value(loss).is_output = true;
  g.value(loss).is_loss = true;
  BackwardResult bw = build_backward(g, loss);
  std::vector<ValueId> grads;
  for (auto& [leaf, gv] : bw.grads) {
    grads.push_back(gv);
    g.value(gv).is_output = true;
  }
  Feed f = random_feed(g, 66, 5);
  std::vector<ValueId> read = grads;
  read.push_back(loss);
  Outputs cpu = run_on(g, Backend::Cpu, f, read);
  Outputs ref = run_on(g, Backend::Reference, f, read);
  // Three layers of f32 products: a few times the single-op tolerance, relative
  // to the largest gradient element of each tensor.
  for (ValueId v : read) {
    double mx = 0;
    for (float r : ref.f32[v]) mx = std::max(mx, static_cast<double>(std::abs(r)));
    expect_close(g.value(v).name, cpu.f32[v], ref.f32[v], std::vector<double>(ref.f32[v].size(), 1e-4 * mx));
  }
}

// pool_first (memfit/rewrite.hpp) makes relu then max pooling into max
// pooling then relu: the loss and every gradient are the same bits as the
// graph left as built, on the reference and the CPU kernels, for the
// ConvNet's 2x2 pools and ResNet's overlapping, padded 3x3 stride-2 one. A
// relu whose output something else reads too stays where it is.
TEST(CpuKernels, PoolFirstGivesTheSameLossAndGradients) {
  struct Built {
    Graph g;
    ValueId loss = kNone;
    std::vector<std::string> grads;  // the parameters' names
  };
  auto build = [](Built& m, bool rewrite, int64_t k, int64_t pad) {
    Graph& g = m.g;
    Builder b(g);
    ValueId x = g.input("x", {4, 3, 12, 12});
    ValueId h = relu(b, conv2d(b, x, 8, 3, {.pad = 1, .name = "conv"}));
    h = max_pool2d(b, h, k, {.stride = 2, .pad = pad});
    ValueId y = linear(b, flatten(b, h), 5, {.name = "fc"});
    ValueId labels = g.input("labels", {4}, DType::i32);
    m.loss = softmax_xent(b, y, labels);
    g.value(m.loss).is_output = true;
    g.value(m.loss).is_loss = true;
    if (rewrite) EXPECT_EQ(pool_first(g), 1);
    for (auto& [leaf, gv] : build_backward(g, m.loss).grads) {
      g.value(gv).is_output = true;
      m.grads.push_back(g.value(leaf).name);
    }
  };
  auto forward_ops = [](const Graph& g) {
    std::vector<std::string> ops;
    for (const Node& n : g.nodes())
      if (n.phase == Phase::Forward) ops.push_back(n.op);
    return ops;
  };
  for (const auto& [k, pad] : std::vector<std::pair<int64_t, int64_t>>{{2, 0}, {3, 1}}) {
    Built fast, kept;
    build(fast, true, k, pad);
    build(kept, false, k, pad);
    const std::vector<std::string> ops_fast = forward_ops(fast.g), ops_kept = forward_ops(kept.g);
    ASSERT_GE(ops_fast.size(), 3u);
    EXPECT_EQ(std::vector<std::string>(ops_fast.begin() + 1, ops_fast.begin() + 3),
              (std::vector<std::string>{"max_pool2d", "relu"}));
    EXPECT_EQ(std::vector<std::string>(ops_kept.begin() + 1, ops_kept.begin() + 3),
              (std::vector<std::string>{"relu", "max_pool2d"}));
    ASSERT_EQ(fast.grads, kept.grads);
    EXPECT_EQ(fast.grads.size(), 4u) << "conv and fc, weight and bias";
    const Feed f = random_feed(fast.g, 71, 5);
    Feed fk;  // the same data by name
    for (const auto& [v, d] : f.f32) fk.f32[kept.g.find(fast.g.value(v).name)] = d;
    for (const auto& [v, d] : f.i32) fk.i32[kept.g.find(fast.g.value(v).name)] = d;
    for (Backend be : {Backend::Reference, Backend::Cpu}) {
      SCOPED_TRACE(std::string(backend_name(be)) + " window " + std::to_string(k));
      std::vector<ValueId> read_fast{fast.loss}, read_kept{kept.loss};
      for (const std::string& p : fast.grads) {
        read_fast.push_back(fast.g.value(fast.g.find(p)).grad);
        read_kept.push_back(kept.g.value(kept.g.find(p)).grad);
      }
      Outputs a = run_on(fast.g, be, f, read_fast), b = run_on(kept.g, be, fk, read_kept);
      for (size_t i = 0; i < read_fast.size(); ++i) {
        const std::vector<float>&u = a.f32[read_fast[i]], &w = b.f32[read_kept[i]];
        ASSERT_EQ(u.size(), w.size());
        EXPECT_EQ(std::memcmp(u.data(), w.data(), u.size() * sizeof(float)), 0)
            << (i ? "gradient of " + fast.grads[i - 1] : std::string("loss")) << " differs";
      }
    }
  }
  // A relu read by the pooling and by something else stays before it.
  Graph g;
  Builder b(g);
  ValueId x = g.input("x", {2, 3, 8, 8});
  ValueId h = relu(b, conv2d(b, x, 4, 3, {.pad = 1, .name = "conv"}));
  ValueId p = max_pool2d(b, h, 2);
  ValueId s = add(b, p, max_pool2d(b, h, 2, {.stride = 2}));
  g.value(s).is_output = true;
  EXPECT_EQ(pool_first(g), 0);
}

TEST(CpuKernels, Dropout) {
  for (double p : {0.4, 0.1}) {
    Graph g;
    ValueId x = g.input("x", {3, 33335});
    auto outs = g.add_node("dropout", {x}, {{"p", p}, {"stream", int64_t(987654321)}}, "drop");
    ValueId dy = g.input("dy", {3, 33335});
    ValueId dx = g.add1("dropout_bwd", {dy, outs[1]}, {{"p", p}, {"stream", int64_t(987654321)}}, "drop",
                        Phase::Backward);
    mark_outputs(g, {outs[0], outs[1], dx});
    expect_kernel(g, "dropout", "cpu.dropout");
    expect_kernel(g, "dropout_bwd", "cpu.dropout_bwd");
    Feed f = random_feed(g, 71);
    Outputs cpu = run_on(g, Backend::Cpu, f, {outs[0], outs[1], dx});
    Outputs ref = run_on(g, Backend::Reference, f, {outs[0], outs[1], dx});
    // The same f32 operations in the same order: bitwise equal.
    EXPECT_EQ(cpu.u8[outs[1]], ref.u8[outs[1]]);
    EXPECT_EQ(cpu.f32[outs[0]], ref.f32[outs[0]]);
    EXPECT_EQ(cpu.f32[dx], ref.f32[dx]);
  }
}

TEST(CpuKernels, SoftmaxXent) {
  for (double s : {0.0, 0.1}) {
    for (Shape zs : {Shape{64, 10}, Shape{3, 7}, Shape{512, 1000}}) {
      SCOPED_TRACE(shape_str(zs) + " smoothing " + std::to_string(s));
      Graph g;
      ValueId z = g.input("z", zs);
      ValueId labels = g.input("labels", {zs[0]}, DType::i32);
      auto outs = g.add_node("softmax_xent", {z, labels}, {{"smoothing", s}}, "loss");
      ValueId dl = g.input("dloss", {1});
      ValueId dz = g.add1("softmax_xent_bwd", {outs[1], labels, dl}, {{"smoothing", s}}, "loss", Phase::Backward);
      mark_outputs(g, {outs[0], dz});
      g.value(outs[1]).is_output = true;
      expect_kernel(g, "softmax_xent", "cpu.softmax_xent");
      expect_kernel(g, "softmax_xent_bwd", "cpu.softmax_xent_bwd");
      Feed f = random_feed(g, 72, static_cast<int32_t>(zs[1]));
      for (float& v : f.f32[z]) v *= 8.0f;
      Outputs cpu = run_on(g, Backend::Cpu, f, {outs[0], outs[1], dz});
      Outputs ref = run_on(g, Backend::Reference, f, {outs[0], outs[1], dz});
      // Double arithmetic rounded to f32 once; the loss sum over rows is
      // reordered across threads (double): 1 ulp of f32 either way.
      for (ValueId v : {outs[0], outs[1], dz}) {
        std::vector<double> tol(ref.f32[v].size());
        for (size_t i = 0; i < tol.size(); ++i) tol[i] = kEltTol * std::abs(ref.f32[v][i]);
        expect_close(g.value(v).name, cpu.f32[v], ref.f32[v], tol);
      }
    }
  }
}

// ---------------------------------------------------------------- optimizers

// Params of several sizes (one above the threading threshold), their
// gradients as inputs, an update node; three steps.
void check_optimizer(const OptimizerConfig& oc, const std::string& kernel) {
  SCOPED_TRACE(oc.kind + " momentum " + std::to_string(oc.momentum) + (oc.nesterov ? " nesterov" : "") + " wd " +
               std::to_string(oc.weight_decay) + " clip " + std::to_string(oc.clip_grad_norm));
  Graph g;
  Builder b(g);
  ValueId x = g.input("x", {4, 300});
  ValueId h = relu(b, linear(b, x, 211, {.name = "fc1"}));
  ValueId y = linear(b, h, 7, {.name = "fc2"});
  ValueId labels = g.input("labels", {4}, DType::i32);
  ValueId loss = softmax_xent(b, y, labels);
  g.value(loss).is_loss = true;
  g.value(loss).is_output = true;
  build_backward(g, loss);
  append_optimizer(g, oc);
  expect_kernel(g, oc.kind == "sgd" ? "sgd_update" : "adam_update", kernel);
  std::vector<ValueId> read;
  for (size_t v = 0; v < g.num_values(); ++v) {
    VClass c = g.value(static_cast<ValueId>(v)).cls;
    if (c == VClass::Param || c == VClass::OptState) read.push_back(static_cast<ValueId>(v));
  }
  Feed f = random_feed(g, 81, 7);
  kernels::StepContext ctx = default_ctx();
  ctx.step = 0;
  ctx.grad_scale = 0.5;
  Outputs cpu = run_on(g, Backend::Cpu, f, read, 3, ctx);
  Outputs ref = run_on(g, Backend::Reference, f, read, 3, ctx);
  // The whole step runs three times (forward and backward included), so the
  // gradients carry the linear layers' rounding: 1e-4 of each tensor's largest
  // element covers it; a wrong formula (a missing bias correction, a wrong
  // decay) moves the values by far more.
  for (ValueId v : read) {
    double mx = 0;
    for (float r : ref.f32[v]) mx = std::max(mx, static_cast<double>(std::abs(r)));
    expect_close(g.value(v).name, cpu.f32[v], ref.f32[v], std::vector<double>(ref.f32[v].size(), 1e-4 * mx + 1e-12));
  }
}

TEST(CpuKernels, Optimizers) {
  OptimizerConfig sgd;
  sgd.kind = "sgd";
  sgd.momentum = 0.0;
  check_optimizer(sgd, "cpu.sgd_update");
  sgd.momentum = 0.9;
  sgd.weight_decay = 5e-4;
  check_optimizer(sgd, "cpu.sgd_update");
  sgd.nesterov = true;
  sgd.clip_grad_norm = 0.1;
  check_optimizer(sgd, "cpu.sgd_update");
  OptimizerConfig adam;
  adam.kind = "adam";
  adam.weight_decay = 1e-2;
  check_optimizer(adam, "cpu.adam_update");
  adam.kind = "adamw";
  adam.clip_grad_norm = 0.05;
  check_optimizer(adam, "cpu.adam_update");
}

// The update alone, on fixed gradients: the same roundings in the same order
// as the reference, so 1e-6 of the magnitudes involved.
TEST(CpuKernels, OptimizerUpdateOnly) {
  for (std::string kind : {"sgd", "adam", "adamw"}) {
    for (double clip : {0.0, 1.0}) {
      SCOPED_TRACE(kind + " clip " + std::to_string(clip));
      Graph g;
      std::vector<Shape> shapes = {{100003}, {17, 3}, {5}};
      std::vector<ValueId> ins, params;
      for (size_t t = 0; t < shapes.size(); ++t) params.push_back(g.param(std::string("p").append(std::to_string(t)), shapes[t]));
      ins = params;
      for (size_t t = 0; t < shapes.size(); ++t) ins.push_back(g.input(std::string("g").append(std::to_string(t)), shapes[t]));
      const int states = kind == "sgd" ? 1 : 2;
      for (int s = 0; s < states; ++s)
        for (size_t t = 0; t < shapes.size(); ++t) {
          Value v;
          v.name = std::string("p").append(std::to_string(t)).append(".state").append(std::to_string(s));
          v.shape = shapes[t];
          v.cls = VClass::OptState;
          ins.push_back(g.add_value(v));
        }
      Attrs a{{"kind", kind},       {"momentum", 0.9},     {"nesterov", int64_t(0)},
              {"weight_decay", 0.01}, {"decay", std::vector<int64_t>{1, 1, 0}},
              {"beta1", 0.9},       {"beta2", 0.999},      {"eps", 1e-8},
              {"count", int64_t(shapes.size())}, {"states", int64_t(states)}, {"clip_norm", clip}};
      g.add_node(kind == "sgd" ? "sgd_update" : "adam_update", ins, a, "optimizer", Phase::Update);
      std::vector<ValueId> read;
      for (size_t i = 0; i < ins.size(); ++i)
        if (i < shapes.size() || i >= 2 * shapes.size()) read.push_back(ins[i]);
      Feed f = random_feed(g, 82);
      kernels::StepContext ctx = default_ctx();
      ctx.grad_scale = 0.7;
      Outputs cpu = run_on(g, Backend::Cpu, f, read, 4, ctx);
      Outputs ref = run_on(g, Backend::Reference, f, read, 4, ctx);
      for (ValueId v : read) {
        // Magnitudes involved: the value itself and the parameter scale 1.
        std::vector<double> tol(ref.f32[v].size());
        for (size_t i = 0; i < tol.size(); ++i) tol[i] = 4 * kEltTol * (std::abs(ref.f32[v][i]) + 1.0);
        expect_close(g.value(v).name, cpu.f32[v], ref.f32[v], tol);
      }
    }
  }
}

// ---------------------------------------------------------------- whole steps

// A full training step (forward, loss, backward, SGD update) of a zoo model on
// both backends from the same weights and data: the loss and every updated
// parameter agree. Errors compound through the layers, so the bound is 1e-4
// relative for the loss, and for each parameter tensor's change (lr times the
// gradient) 1e-2 of its L2 norm for the L2 norm of the difference.
//
// Why a norm and not every element: a ReLU whose input lies within rounding
// of zero may switch on in one backend and off in the other (the backends
// round differently, and a step has ~10^5 such units, a few within 1e-6 of
// zero), which moves individual gradient elements by percents; it moves the
// tensor's norm by about one unit's share. A wiring fault (a wrong layout, a
// missing term, a wrong index) is off by a large fraction of the norm.
void check_model_step(const std::string& model, int64_t batch, int64_t channels, int64_t hw, int steps) {
  train::StepSpec spec;
  spec.model = model;
  spec.batch = batch;
  spec.channels = channels;
  spec.height = spec.width = hw;
  spec.optimizer.kind = "sgd";
  spec.optimizer.momentum = 0.9;
  auto sg = train::build_step_graph(spec);
  const Graph& g = sg->g;
  int onednn = 0;
  for (const Node& n : g.nodes()) {
    auto k = make_kernel(g, n, Backend::Cpu);
    if (k && std::string(k->name()).rfind("dnnl.", 0) == 0) ++onednn;
  }
  EXPECT_GT(onednn, 0);
  std::vector<ValueId> read{sg->loss};
  for (ValueId p : g.params()) read.push_back(p);
  Feed f = random_feed(g, 91);
  // Parameters start from the model's initialisation, not from U(-1, 1).
  for (ValueId p : g.params()) f.f32.erase(p);
  for (float& v : f.f32[sg->x]) v = 0.5f * (v + 1.0f);
  Outputs cpu = run_on(g, Backend::Cpu, f, read, steps);
  Outputs ref = run_on(g, Backend::Reference, f, read, steps);
  EXPECT_NEAR(cpu.f32[sg->loss][0], ref.f32[sg->loss][0], 1e-4 * std::abs(ref.f32[sg->loss][0]));
  // Compare the parameters' change from their initial values.
  ExecConfig cfg;
  cfg.backend = Backend::Reference;
  Executor init(g, cfg);
  init.init_params(7);
  for (ValueId p : g.params()) {
    const size_t n = static_cast<size_t>(numel(g.value(p).shape));
    std::vector<float> w0(n);
    init.read_f32(p, w0.data());
    double diff2 = 0, ref2 = 0;
    for (size_t i = 0; i < n; ++i) {
      const double dc = static_cast<double>(cpu.f32[p][i]) - w0[i], dr = static_cast<double>(ref.f32[p][i]) - w0[i];
      EXPECT_TRUE(std::isfinite(dc)) << g.value(p).name << "[" << i << "]";
      diff2 += (dc - dr) * (dc - dr);
      ref2 += dr * dr;
    }
    EXPECT_LE(std::sqrt(diff2), 1e-2 * std::sqrt(ref2) + 1e-7) << g.value(p).name << " change";
  }
}

TEST(CpuKernels, ConvNetTrainingSteps) { check_model_step("convnet", 8, 1, 28, 2); }

TEST(CpuKernels, ResNet18TrainingStep) { check_model_step("resnet18", 2, 3, 16, 1); }

}  // namespace

// ---------------------------------------------------------------- blocked layouts
//
// Kernels that keep activations channel-blocked (nChw16c) against the same
// kernels on plain data (tested above against the reference): the input is
// reordered to blocked, the output back to plain, and the two must agree to
// f32 rounding of a different summation order (1e-5 of the magnitudes).

namespace blk {

using kernels::cpu::Layout;



// Binds k to copies of `ins` and to zeroed outputs of the given sizes, with
// scratch, runs it once and returns the outputs.
std::vector<std::vector<float>> run_kernel(kernels::Kernel& k, std::vector<std::vector<float>> ins,
                                           const std::vector<size_t>& out_sizes) {
  std::vector<std::vector<float>> outs;
  for (size_t n : out_sizes) outs.emplace_back(n, 0.0f);
  std::vector<void*> ip, op;
  for (auto& v : ins) ip.push_back(v.data());
  for (auto& v : outs) op.push_back(v.data());
  std::vector<std::byte> scratch(k.scratch_bytes() + 64);
  k.bind(ip, op, k.scratch_bytes() ? scratch.data() : nullptr);
  k.run(default_ctx());
  return outs;
}

void expect_near_rel(const std::string& what, const std::vector<float>& a, const std::vector<float>& b, double rtol,
                     double scale) {
  std::vector<double> tol(b.size());
  for (size_t i = 0; i < b.size(); ++i) tol[i] = rtol * (std::abs(static_cast<double>(b[i])) + scale);
  expect_close(what, a, b, tol);
}

}  // namespace blk

TEST(CpuKernels, BlockedBatchNorm) {
  using blk::Layout;
  for (Shape xs : {Shape{3, 32, 5, 7}, Shape{2, 16, 2, 2}, Shape{8, 64, 28, 28}}) {
    for (int training : {1, 0}) {
      SCOPED_TRACE(shape_str(xs) + (training ? " training" : " eval"));
      const int64_t N = xs[0], C = xs[1], HW = xs[2] * xs[3];
      const size_t n = static_cast<size_t>(N * C * HW), c = static_cast<size_t>(C);
      kernels::BatchNormParams p{N, C, HW};
      p.training = training != 0;
      std::vector<float> x = memfit::testing::random_floats(n, 1, -1.5f, 2.5f), dy = memfit::testing::random_floats(n, 2);
      std::vector<float> gamma = memfit::testing::random_floats(c, 3), beta = memfit::testing::random_floats(c, 4);
      std::vector<float> rm = memfit::testing::random_floats(c, 5), rv = memfit::testing::random_floats(c, 6, 0.5f, 1.5f);
      auto plain_f = kernels::cpu::make_batch_norm(p, Layout::Plain);
      auto blk_f = kernels::cpu::make_batch_norm(p, Layout::Blocked16);
      auto pf = blk::run_kernel(*plain_f, {x, gamma, beta, rm, rv}, {n, c, c});
      auto bf = blk::run_kernel(*blk_f, {to_blocked(x, N, C, HW), gamma, beta, rm, rv}, {n, c, c});
      blk::expect_near_rel("y", to_plain(bf[0], N, C, HW), pf[0], 1e-5, 1.0);
      blk::expect_near_rel("mean", bf[1], pf[1], 1e-5, 1.0);
      blk::expect_near_rel("var", bf[2], pf[2], 1e-5, 1.0);
      auto plain_b = kernels::cpu::make_batch_norm_bwd(p, Layout::Plain);
      auto blk_b = kernels::cpu::make_batch_norm_bwd(p, Layout::Blocked16);
      auto pb = blk::run_kernel(*plain_b, {x, dy, gamma, pf[1], pf[2]}, {n, c, c});
      auto bb = blk::run_kernel(
          *blk_b, {to_blocked(x, N, C, HW), to_blocked(dy, N, C, HW), gamma, pf[1], pf[2]}, {n, c, c});
      blk::expect_near_rel("dx", to_plain(bb[0], N, C, HW), pb[0], 1e-5, 1.0);
      blk::expect_near_rel("dgamma", bb[1], pb[1], 1e-5, static_cast<double>(N * HW) * 1e-2);
      blk::expect_near_rel("dbeta", bb[2], pb[2], 1e-5, static_cast<double>(N * HW) * 1e-2);
    }
  }
}

TEST(CpuKernels, BlockedGlobalAvgPool) {
  using blk::Layout;
  const int64_t N = 3, C = 48, HW = 7 * 7;
  const size_t n = static_cast<size_t>(N * C * HW);
  kernels::GlobalPoolParams p{N, C, HW};
  std::vector<float> x = memfit::testing::random_floats(n, 7), dy = memfit::testing::random_floats(static_cast<size_t>(N * C), 8);
  auto pf = blk::run_kernel(*kernels::cpu::make_global_avg_pool(p, Layout::Plain), {x}, {size_t(N * C)});
  auto bf = blk::run_kernel(*kernels::cpu::make_global_avg_pool(p, Layout::Blocked16), {to_blocked(x, N, C, HW)},
                            {size_t(N * C)});
  blk::expect_near_rel("y", bf[0], pf[0], 1e-5, 1.0);
  auto pb = blk::run_kernel(*kernels::cpu::make_global_avg_pool_bwd(p, Layout::Plain), {dy}, {n});
  auto bb = blk::run_kernel(*kernels::cpu::make_global_avg_pool_bwd(p, Layout::Blocked16), {dy}, {n});
  EXPECT_EQ(to_plain(bb[0], N, C, HW), pb[0]);
}

// Convolutions with blocked activations: forward (x, y), backward-data (dy,
// dx), backward-weights (x, dy), each layout combination the lowering can ask
// for, against the all-plain kernel.
TEST(CpuKernels, BlockedConv) {
  using blk::Layout;
  for (const ConvCase& c : {ConvCase{2, 16, 9, 9, 32, 3, 3, 1, 1, 1, 1, false},
                            ConvCase{3, 32, 8, 8, 16, 1, 1, 2, 0, 1, 1, false},
                            ConvCase{2, 16, 6, 6, 16, 3, 3, 2, 1, 1, 1, true},
                            ConvCase{2, 3, 8, 8, 16, 3, 3, 1, 1, 1, 1, false},
                            ConvCase{2, 32, 9, 9, 32, 3, 3, 2, 1, 1, 32, true},     // depthwise
                            ConvCase{2, 32, 7, 7, 64, 3, 3, 1, 2, 2, 2, false}}) {  // dilated, 2 groups
    SCOPED_TRACE(conv_str(c));
    const Shape ys = conv_out(c);
    kernels::ConvParams p{c.N, c.C, c.H, c.W, c.K, c.R, c.S, ys[2], ys[3]};
    p.stride_h = p.stride_w = c.stride;
    p.pad_h = p.pad_w = c.pad;
    p.dil_h = p.dil_w = c.dil;
    p.groups = c.groups;
    p.bias = c.bias;
    const int64_t xhw = c.H * c.W, yhw = ys[2] * ys[3];
    const size_t nx = static_cast<size_t>(c.N * c.C * xhw), ny = static_cast<size_t>(c.N * c.K * yhw),
                 nw = static_cast<size_t>(c.K * c.C / c.groups * c.R * c.S);
    std::vector<float> x = memfit::testing::random_floats(nx, 11), w = memfit::testing::random_floats(nw, 12), b = memfit::testing::random_floats(size_t(c.K), 13),
                       dy = memfit::testing::random_floats(ny, 14);
    const bool xb_ok = c.C % 16 == 0;
    auto xin = [&](Layout l) { return l == Layout::Plain ? x : to_blocked(x, c.N, c.C, xhw); };
    auto dyin = [&](Layout l) { return l == Layout::Plain ? dy : to_blocked(dy, c.N, c.K, yhw); };
    auto yout = [&](const std::vector<float>& v, Layout l) { return l == Layout::Plain ? v : to_plain(v, c.N, c.K, yhw); };
    auto xout = [&](const std::vector<float>& v, Layout l) { return l == Layout::Plain ? v : to_plain(v, c.N, c.C, xhw); };
    std::vector<std::vector<float>> fwd_in{x, w};
    if (c.bias) fwd_in.push_back(b);
    auto ref_y = blk::run_kernel(*kernels::cpu::make_conv2d(p), fwd_in, {ny});
    auto ref_dx = blk::run_kernel(*kernels::cpu::make_conv2d_bwd_data(p), {dy, w}, {nx});
    std::vector<size_t> bw_out{nw};
    if (c.bias) bw_out.push_back(size_t(c.K));
    auto ref_dw = blk::run_kernel(*kernels::cpu::make_conv2d_bwd_weight(p), {x, dy}, bw_out);
    for (Layout xl : {Layout::Plain, Layout::Blocked16}) {
      if (xl == Layout::Blocked16 && !xb_ok) continue;
      for (Layout yl : {Layout::Plain, Layout::Blocked16}) {
        SCOPED_TRACE(std::string("x ") + (xl == Layout::Plain ? "plain" : "blocked") + ", y " +
                     (yl == Layout::Plain ? "plain" : "blocked"));
        auto kf = kernels::cpu::make_conv2d(p, xl, yl);
        ASSERT_TRUE(kf);
        std::vector<std::vector<float>> in{xin(xl), w};
        if (c.bias) in.push_back(b);
        auto y = blk::run_kernel(*kf, in, {ny});
        blk::expect_near_rel("y", yout(y[0], yl), ref_y[0], 1e-5, 1.0);
        auto kd = kernels::cpu::make_conv2d_bwd_data(p, yl, xl);
        ASSERT_TRUE(kd);
        auto dx = blk::run_kernel(*kd, {dyin(yl), w}, {nx});
        blk::expect_near_rel("dx", xout(dx[0], xl), ref_dx[0], 1e-5, 1.0);
        auto kw = kernels::cpu::make_conv2d_bwd_weight(p, xl, yl);
        ASSERT_TRUE(kw);
        auto dw = blk::run_kernel(*kw, {xin(xl), dyin(yl)}, bw_out);
        blk::expect_near_rel("dw", dw[0], ref_dw[0], 1e-5, 1.0);
        if (c.bias) blk::expect_near_rel("db", dw[1], ref_dw[1], 1e-5, 1.0);
      }
    }
  }
}

// The first layer's weight gradient (memfit's own kernel for few input taps,
// x plain, dy blocked) against the double reference on the same f32 inputs.
// Its sums are f32 over one image's OH x OW positions, then double: each
// element is within (OH OW + 1) u sum |dy x| + u |dw| of the exact sum (u =
// 2^-24, the f32 unit roundoff: the worst case of a sum of OH OW terms,
// its flush to double and the final rounding), sum |dy x| from the
// reference run on |x| and |dy|.
TEST(CpuKernels, FewTapsWeightGradient) {
  struct Case {
    int64_t N, C, H, W, K, R, S, stride, pad, dil;
    bool bias;
  };
  for (const Case& c : {Case{5, 1, 28, 28, 32, 5, 5, 1, 2, 1, true},   // the ConvNet's first layer
                        Case{3, 1, 28, 28, 64, 3, 3, 1, 1, 1, false},  // ResNet-18's, on 28 x 28
                        Case{2, 3, 11, 9, 16, 3, 3, 1, 1, 1, true},    // RGB, odd sizes
                        Case{3, 2, 9, 10, 48, 3, 3, 1, 0, 2, false},   // dilated, no padding
                        Case{1, 1, 7, 7, 16, 7, 3, 1, 3, 1, true}}) {  // a tall kernel, 21 taps
    SCOPED_TRACE(::testing::Message() << "N" << c.N << " C" << c.C << " " << c.H << "x" << c.W << " K" << c.K << " "
                                    << c.R << "x" << c.S << " stride " << c.stride << " pad " << c.pad << " dil "
                                    << c.dil);
    kernels::ConvParams p{c.N, c.C, c.H, c.W, c.K, c.R, c.S, 0, 0};
    p.stride_h = p.stride_w = c.stride;
    p.pad_h = p.pad_w = c.pad;
    p.dil_h = p.dil_w = c.dil;
    p.bias = c.bias;
    p.OH = (c.H + 2 * c.pad - c.dil * (c.R - 1) - 1) / c.stride + 1;
    p.OW = (c.W + 2 * c.pad - c.dil * (c.S - 1) - 1) / c.stride + 1;
    const int64_t yhw = p.OH * p.OW;
    const size_t nx = static_cast<size_t>(c.N * c.C * c.H * c.W), ny = static_cast<size_t>(c.N * c.K * yhw),
                 nw = static_cast<size_t>(c.K * c.C * c.R * c.S);
    std::vector<float> x = memfit::testing::random_floats(nx, 21), dy = memfit::testing::random_floats(ny, 22);
    for (size_t i = 0; i < ny; i += 3) dy[i] = -dy[i];  // sums with cancellation
    std::vector<size_t> outs{nw};
    if (c.bias) outs.push_back(size_t(c.K));
    auto ref = [&](const std::vector<float>& xf, const std::vector<float>& dyf) {
      std::vector<double> xd(xf.begin(), xf.end()), dyd(dyf.begin(), dyf.end());
      std::vector<std::vector<double>> o;
      for (size_t n : outs) o.emplace_back(n, 0.0);
      kernels::ref::Conv2dBwdWeight<double> r(p);
      std::vector<void*> op;
      for (auto& v : o) op.push_back(v.data());
      r.bind({xd.data(), dyd.data()}, op, nullptr);
      r.run(default_ctx());
      return o;
    };
    std::vector<float> ax(x), ady(dy);
    for (float& v : ax) v = std::abs(v);
    for (float& v : ady) v = std::abs(v);
    const auto exact = ref(x, dy), mag = ref(ax, ady);
    const double u = std::ldexp(1.0, -24), n_sum = static_cast<double>(yhw + 1);
    ASSERT_TRUE(kernels::cpu::conv2d_bwd_weight_taps_takes(p));
    auto k = kernels::cpu::make_conv2d_bwd_weight_taps(p);
    ASSERT_TRUE(k);
    auto got = blk::run_kernel(*k, {x, dy}, outs);
    for (size_t o = 0; o < outs.size(); ++o)
      for (size_t i = 0; i < outs[o]; ++i) {
        const double bound = n_sum * u * mag[o][i] + u * std::abs(exact[o][i]);
        ASSERT_LE(std::abs(static_cast<double>(got[o][i]) - exact[o][i]), bound)
            << (o ? "db[" : "dw[") << i << "]: " << got[o][i] << " against " << exact[o][i];
      }
  }
  // Shapes it does not take: many taps, channels not a whole block, groups.
  kernels::ConvParams many{2, 16, 8, 8, 16, 3, 3, 8, 8};
  EXPECT_FALSE(kernels::cpu::conv2d_bwd_weight_taps_takes(many));
  kernels::ConvParams k6{2, 1, 8, 8, 6, 3, 3, 6, 6};
  EXPECT_FALSE(kernels::cpu::conv2d_bwd_weight_taps_takes(k6));
  kernels::ConvParams grouped{2, 2, 8, 8, 16, 3, 3, 6, 6};
  grouped.groups = 2;
  EXPECT_FALSE(kernels::cpu::conv2d_bwd_weight_taps_takes(grouped));
  kernels::ConvParams strided{2, 1, 8, 8, 16, 3, 3, 3, 3};
  strided.stride_h = strided.stride_w = 2;
  EXPECT_FALSE(kernels::cpu::conv2d_bwd_weight_taps_takes(strided));
}

// The Winograd F(2x2, 3x3) and F(4x4, 3x3) forward and backward-data
// kernels against the double reference on the same f32 inputs. Bound per
// element: (Cin + e) u y_abs, u = 2^-24 the f32 unit roundoff, where y_abs
// is the same Winograd evaluation on absolute values (|A^T| (|G| |g| |G^T| .
// |B^T| |d| |B|) |A| summed over the input channels, plus |bias|): each
// term of the computed sum passes through at most that many roundings
// (first order). Counted for F(2,3): the filter transform 2 per dimension
// (the halvings are exact), the input transform 1 per dimension, the
// product 1, Cin sums over the channels, the output transform 2 per
// dimension and the bias: Cin + 12, e = 16. For F(4,3): the filter
// transform 5 per dimension (three products by inexact constants such as
// 1/6, two sums), the input 3, the product 1, the channels, the output 3
// per dimension (the products by 2, 4 and 8 exact) and the bias: Cin + 29,
// e = 32. y_abs, not the direct sum of |w x|, carries the transforms'
// growth (F(4,3)'s coefficients reach 8 x 5), which is the error these
// algorithms have.
namespace wino {

// c1[i][r][q] = sum over p of |A^T[i][p]| |G[p][r]| |B^T[p][q]| for F(m, 3):
// how much tap r and input q of a tile feed output i, in absolute values.
std::vector<double> abs_coefficients(int m) {
  const int a = m + 2;
  std::vector<double> AT, G, BT;
  if (m == 2) {
    AT = {1, 1, 1, 0, 0, 1, 1, 1};
    G = {1, 0, 0, .5, .5, .5, .5, .5, .5, 0, 0, 1};
    BT = {1, 0, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 0, 1};
  } else {
    AT = {1, 1, 1, 1, 1, 0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 4, 4, 0, 0, 1, 1, 8, 8, 1};
    G = {1. / 4, 0, 0, 1. / 6, 1. / 6, 1. / 6, 1. / 6, 1. / 6, 1. / 6, 1. / 24, 1. / 12, 1. / 6,
         1. / 24, 1. / 12, 1. / 6, 0, 0, 1};
    BT = {4, 0, 5, 0, 1, 0, 0, 4, 4, 1, 1, 0, 0, 4, 4, 1, 1, 0, 0, 2, 1, 2, 1, 0, 0, 2, 1, 2, 1, 0, 0, 4, 0, 5, 0, 1};
  }
  std::vector<double> c(static_cast<size_t>(m * 3 * a), 0.0);
  for (int i = 0; i < m; ++i)
    for (int r = 0; r < 3; ++r)
      for (int q = 0; q < a; ++q)
        for (int p = 0; p < a; ++p) c[static_cast<size_t>((i * 3 + r) * a + q)] += AT[i * a + p] * G[p * 3 + r] * BT[p * a + q];
  return c;
}

// y_abs for out[o][i][j] = sum g[o][c][r][s] in[c][i - pad + r][j - pad + s]
// (+ b[o]) computed with tiles of m x m outputs; in plain [N][Cin][H][W], g
// [Cout][Cin][3][3].
std::vector<double> abs_winograd(int m, const std::vector<float>& in, const std::vector<double>& g, const float* b,
                                 int64_t N, int64_t Cin, int64_t H, int64_t W, int64_t Cout, int64_t OH, int64_t OW,
                                 int64_t pad) {
  const int a = m + 2;
  const auto c1 = abs_coefficients(m);
  auto coef = [&](int64_t i, int r, int q) { return c1[static_cast<size_t>((i % m * 3 + r) * a + q)]; };
  std::vector<double> y(static_cast<size_t>(N * Cout * OH * OW), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < Cout; ++o)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          double sum = b ? std::abs(static_cast<double>(b[o])) : 0.0;
          const int64_t h0 = i / m * m - pad, w0 = j / m * m - pad;
          for (int64_t c = 0; c < Cin; ++c)
            for (int r = 0; r < 3; ++r)
              for (int s2 = 0; s2 < 3; ++s2) {
                const double gv = g[static_cast<size_t>(((o * Cin + c) * 3 + r) * 3 + s2)];
                for (int p = 0; p < a; ++p) {
                  const int64_t h = h0 + p;
                  if (h < 0 || h >= H || coef(i, r, p) == 0) continue;
                  for (int q = 0; q < a; ++q) {
                    const int64_t w = w0 + q;
                    if (w < 0 || w >= W || coef(j, s2, q) == 0) continue;
                    sum += coef(i, r, p) * coef(j, s2, q) * gv *
                           std::abs(static_cast<double>(in[static_cast<size_t>(((n * Cin + c) * H + h) * W + w)]));
                  }
                }
              }
          y[static_cast<size_t>(((n * Cout + o) * OH + i) * OW + j)] = sum;
        }
  return y;
}

}  // namespace wino

TEST(CpuKernels, WinogradConvolution) {
  struct Case {
    int64_t N, C, H, W, K, pad;
    bool bias;
  };
  for (const Case& c : {Case{3, 32, 9, 9, 64, 1, true},    // odd sizes: a last row and column of half tiles
                        Case{5, 64, 4, 4, 32, 1, false},   // ResNet-18's last stage: one tile row per 2 rows
                        Case{2, 32, 7, 6, 32, 0, true},    // no padding (backward-data pads by 2)
                        Case{2, 32, 5, 8, 32, 2, false},   // padding 2 (backward-data pads by 0)
                        Case{7, 32, 6, 6, 32, 1, false}}) {  // a last tile row and column of 2 of 4 outputs
    SCOPED_TRACE(::testing::Message() << "N" << c.N << " C" << c.C << " " << c.H << "x" << c.W << " K" << c.K
                                    << " pad " << c.pad << (c.bias ? " bias" : ""));
    kernels::ConvParams p{c.N, c.C, c.H, c.W, c.K, 3, 3, c.H + 2 * c.pad - 2, c.W + 2 * c.pad - 2};
    p.pad_h = p.pad_w = c.pad;
    p.bias = c.bias;
    ASSERT_TRUE(kernels::cpu::conv2d_winograd_takes(p));
    const int64_t xhw = c.H * c.W, yhw = p.OH * p.OW;
    const size_t nx = static_cast<size_t>(c.N * c.C * xhw), ny = static_cast<size_t>(c.N * c.K * yhw),
                 nw = static_cast<size_t>(c.K * c.C * 9);
    std::vector<float> x = memfit::testing::random_floats(nx, 31), w = memfit::testing::random_floats(nw, 32),
                       b = memfit::testing::random_floats(size_t(c.K), 33), dy = memfit::testing::random_floats(ny, 34);
    const double u = std::ldexp(1.0, -24);
    auto check = [&](const char* what, int tile, const std::vector<float>& got, const std::vector<double>& exact,
                     const std::vector<double>& mag, int64_t cin) {
      ASSERT_EQ(got.size(), exact.size());
      const double e = tile == 2 ? 16 : 32;
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_LE(std::abs(static_cast<double>(got[i]) - exact[i]), (static_cast<double>(cin) + e) * u * mag[i])
            << what << " F(" << tile << ",3) [" << i << "]: " << got[i] << " against " << exact[i];
    };
    std::vector<double> xd(x.begin(), x.end()), wd(w.begin(), w.end()), bd(b.begin(), b.end()),
        dyd(dy.begin(), dy.end());
    // Forward.
    {
      std::vector<double> y(ny);
      kernels::ref::Conv2d<double> r(p);
      std::vector<void*> in{xd.data(), wd.data()};
      if (c.bias) in.push_back(bd.data());
      r.bind(in, {y.data()}, nullptr);
      r.run(default_ctx());
      std::vector<double> wa(nw);
      for (size_t i = 0; i < nw; ++i) wa[i] = std::abs(wd[i]);
      for (int tile : {2, 4}) {
        const auto mag = wino::abs_winograd(tile, x, wa, c.bias ? b.data() : nullptr, c.N, c.C, c.H, c.W, c.K, p.OH,
                                            p.OW, c.pad);
        auto k = kernels::cpu::make_conv2d_winograd(p, tile);
        ASSERT_TRUE(k);
        EXPECT_EQ(std::string(k->name()), "cpu.conv2d_winograd" + std::to_string(tile));
        std::vector<std::vector<float>> in_f{to_blocked(x, c.N, c.C, xhw), w};
        if (c.bias) in_f.push_back(b);
        auto got = blk::run_kernel(*k, in_f, {ny});
        check("y", tile, to_plain(got[0], c.N, c.K, yhw), y, mag, c.C);
      }
    }
    // Backward-data: the convolution of dy with the filters turned, padded by 2 - pad.
    {
      std::vector<double> dx(nx);
      kernels::ref::Conv2dBwdData<double> r(p);
      r.bind({dyd.data(), wd.data()}, {dx.data()}, nullptr);
      r.run(default_ctx());
      std::vector<double> wt(nw);  // [C][K][3][3], turned by 180 degrees
      for (int64_t k = 0; k < c.K; ++k)
        for (int64_t ch = 0; ch < c.C; ++ch)
          for (int64_t t = 0; t < 9; ++t)
            wt[static_cast<size_t>((ch * c.K + k) * 9 + 8 - t)] = std::abs(wd[static_cast<size_t>((k * c.C + ch) * 9 + t)]);
      for (int tile : {2, 4}) {
        const auto mag = wino::abs_winograd(tile, dy, wt, nullptr, c.N, c.K, p.OH, p.OW, c.C, c.H, c.W, 2 - c.pad);
        auto k = kernels::cpu::make_conv2d_bwd_data_winograd(p, tile);
        ASSERT_TRUE(k);
        EXPECT_EQ(std::string(k->name()), "cpu.conv2d_bwd_data_winograd" + std::to_string(tile));
        auto got = blk::run_kernel(*k, {to_blocked(dy, c.N, c.K, yhw), w}, {nx});
        check("dx", tile, to_plain(got[0], c.N, c.C, xhw), dx, mag, c.K);
      }
    }
  }
  // The filters transformed a group of output channels at a time (a limit
  // of 1 byte: groups of 64, here 64 + 32): each output's sum over the
  // input channels is the same, so are the bits. 288 tiles of F(2, 3) make
  // several blocks per thread (each block's input transformed again for
  // each group), 72 of F(4, 3) one block per thread (transformed once).
  {
    kernels::ConvParams p{2, 96, 24, 24, 96, 3, 3, 24, 24};
    p.pad_h = p.pad_w = 1;
    p.bias = true;
    const size_t n = static_cast<size_t>(2 * 96 * 24 * 24);
    const std::vector<float> x = memfit::testing::random_floats(n, 44), w = memfit::testing::random_floats(96 * 96 * 9, 45),
                             b = memfit::testing::random_floats(96, 46);
    for (int tile : {2, 4}) {
      auto y = kernels::cpu::make_conv2d_winograd(p, tile), yg = kernels::cpu::make_conv2d_winograd(p, tile, 1);
      auto dx = kernels::cpu::make_conv2d_bwd_data_winograd(p, tile);
      auto dxg = kernels::cpu::make_conv2d_bwd_data_winograd(p, tile, 1);
      EXPECT_LT(yg->scratch_bytes(), y->scratch_bytes());
      EXPECT_TRUE(std::ranges::equal(blk::run_kernel(*yg, {x, w, b}, {n})[0], blk::run_kernel(*y, {x, w, b}, {n})[0]))
          << "y in groups, F(" << tile << ",3)";
      EXPECT_TRUE(std::ranges::equal(blk::run_kernel(*dxg, {x, w}, {n})[0], blk::run_kernel(*dx, {x, w}, {n})[0]))
          << "dx in groups, F(" << tile << ",3)";
    }
  }
  // Many blocks of tiles (on each thread): each tile's sums do not depend on
  // the block it falls in, so the whole batch equals each image run alone,
  // to the bit.
  {
    const int64_t N = 60, C = 32, HW = 6;
    kernels::ConvParams p{N, C, HW, HW, C, 3, 3, HW, HW};
    p.pad_h = p.pad_w = 1;
    p.bias = true;
    kernels::ConvParams one = p;
    one.N = 1;
    const size_t n = static_cast<size_t>(N * C * HW * HW), per = n / N;
    const std::vector<float> x = memfit::testing::random_floats(n, 41), w = memfit::testing::random_floats(size_t(C * C * 9), 42),
                             b = memfit::testing::random_floats(size_t(C), 43);
    for (int tile : {2, 4})
      for (bool bwd : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "F(" << tile << ",3) " << (bwd ? "backward-data" : "forward"));
        auto make = [&](const kernels::ConvParams& q) {
          return bwd ? kernels::cpu::make_conv2d_bwd_data_winograd(q, tile) : kernels::cpu::make_conv2d_winograd(q, tile);
        };
        auto all = make(p);
        std::vector<std::vector<float>> in{x, w};
        if (!bwd) in.push_back(b);
        const auto whole = blk::run_kernel(*all, in, {n});
        for (int64_t i = 0; i < N; ++i) {
          in[0].assign(x.begin() + i * per, x.begin() + (i + 1) * per);
          auto k = make(one);
          const auto alone = blk::run_kernel(*k, in, {per});
          ASSERT_TRUE(std::equal(alone[0].begin(), alone[0].end(), whole[0].begin() + i * per)) << "image " << i;
        }
      }
  }
  // Tiles it does not have; shapes it does not take: 5x5, strided, dilated,
  // grouped, channels not a multiple of 32.
  auto base = [] {
    kernels::ConvParams q{2, 32, 8, 8, 32, 3, 3, 8, 8};
    q.pad_h = q.pad_w = 1;
    return q;
  };
  kernels::ConvParams q = base();
  EXPECT_TRUE(kernels::cpu::conv2d_winograd_takes(q));
  EXPECT_FALSE(kernels::cpu::make_conv2d_winograd(q, 3));
  EXPECT_FALSE(kernels::cpu::make_conv2d_bwd_data_winograd(q, 6));
  q.R = q.S = 5;
  EXPECT_FALSE(kernels::cpu::conv2d_winograd_takes(q));
  q = base();
  q.stride_h = q.stride_w = 2;
  q.OH = q.OW = 4;
  EXPECT_FALSE(kernels::cpu::conv2d_winograd_takes(q));
  q = base();
  q.dil_h = q.dil_w = 2;
  EXPECT_FALSE(kernels::cpu::conv2d_winograd_takes(q));
  q = base();
  q.groups = 2;
  EXPECT_FALSE(kernels::cpu::conv2d_winograd_takes(q));
  q = base();
  q.C = 24;
  EXPECT_FALSE(kernels::cpu::conv2d_winograd_takes(q));
}

// The Winograd weight gradient (the transpose of F(2x2, 3x3)) against the
// double reference on the same f32 inputs. Bound per element: (T + 10) u
// dw_abs, u = 2^-24, T the tiles summed, where dw_abs is the same evaluation
// on absolute values, sum over tiles of (|G^T| . (|A| |dy| |A^T|) .
// (|B^T| |d| |B|) . |G|): each term passes through the input transform's
// sums (1 per dimension), dy's (1 per dimension), the product, at most T - 1
// sums over the tiles, 1 adding the tile ranges' partial sums, and the
// output transform's 2 per dimension (the halvings are exact): T + 9,
// first order. The bias gradient, a plain sum of N OH OW terms: N OH OW u
// sum |dy|.
TEST(CpuKernels, WinogradWeightGradient) {
  struct Case {
    int64_t N, C, H, W, K, pad;
    bool bias;
  };
  // c1[r][a][q] = sum over p of |G^T[r][p]| |A[p][a]| |B^T[p][q]|: how much
  // dy's a and x's q of a tile's row feed tap r.
  const double GT[3][4] = {{1, .5, .5, 0}, {0, .5, .5, 0}, {0, .5, .5, 1}};
  const double A[4][2] = {{1, 0}, {1, 1}, {1, 1}, {0, 1}};
  const double BT[4][4] = {{1, 0, 1, 0}, {0, 1, 1, 0}, {0, 1, 1, 0}, {0, 1, 0, 1}};
  double c1[3][2][4] = {};
  for (int r = 0; r < 3; ++r)
    for (int a = 0; a < 2; ++a)
      for (int q = 0; q < 4; ++q)
        for (int p = 0; p < 4; ++p) c1[r][a][q] += GT[r][p] * A[p][a] * BT[p][q];
  for (const Case& c : {Case{3, 32, 9, 9, 64, 1, true},     // odd sizes: half tiles at the edge
                        Case{2, 96, 6, 6, 160, 1, false},   // several chunks of channels, the last of 32
                        Case{8, 32, 8, 8, 32, 1, true},     // one chunk: the tiles split between threads
                        Case{2, 32, 7, 6, 32, 0, false},    // no padding
                        Case{2, 32, 5, 8, 32, 2, false}}) {  // padding 2
    SCOPED_TRACE(::testing::Message() << "N" << c.N << " C" << c.C << " " << c.H << "x" << c.W << " K" << c.K
                                      << " pad " << c.pad << (c.bias ? " bias" : ""));
    kernels::ConvParams p{c.N, c.C, c.H, c.W, c.K, 3, 3, c.H + 2 * c.pad - 2, c.W + 2 * c.pad - 2};
    p.pad_h = p.pad_w = c.pad;
    p.bias = c.bias;
    const int64_t xhw = c.H * c.W, yhw = p.OH * p.OW, TH = (p.OH + 1) / 2, TW = (p.OW + 1) / 2, T = c.N * TH * TW;
    const size_t nx = static_cast<size_t>(c.N * c.C * xhw), ny = static_cast<size_t>(c.N * c.K * yhw),
                 nw = static_cast<size_t>(c.K * c.C * 9);
    const std::vector<float> x = memfit::testing::random_floats(nx, 51), dy = memfit::testing::random_floats(ny, 52);
    std::vector<double> xd(x.begin(), x.end()), dyd(dy.begin(), dy.end()), dw(nw), db(size_t(c.K));
    kernels::ref::Conv2dBwdWeight<double> r(p);
    std::vector<void*> outs{dw.data()};
    if (c.bias) outs.push_back(db.data());
    r.bind({xd.data(), dyd.data()}, outs, nullptr);
    r.run(default_ctx());
    auto k = kernels::cpu::make_conv2d_bwd_weight_winograd(p);
    ASSERT_TRUE(k);
    EXPECT_EQ(std::string(k->name()), "cpu.conv2d_bwd_weight_winograd2");
    std::vector<size_t> sizes{nw};
    if (c.bias) sizes.push_back(size_t(c.K));
    const auto got = blk::run_kernel(*k, {to_blocked(x, c.N, c.C, xhw), to_blocked(dy, c.N, c.K, yhw)}, sizes);
    const double u = std::ldexp(1.0, -24);
    auto X = [&](int64_t n, int64_t ch, int64_t h, int64_t w) {
      return h < 0 || h >= c.H || w < 0 || w >= c.W ? 0.0 : std::abs(xd[size_t(((n * c.C + ch) * c.H + h) * c.W + w)]);
    };
    auto D = [&](int64_t n, int64_t o, int64_t i, int64_t j) {
      return i >= p.OH || j >= p.OW ? 0.0 : std::abs(dyd[size_t(((n * c.K + o) * p.OH + i) * p.OW + j)]);
    };
    for (int64_t o = 0; o < c.K; ++o)
      for (int64_t ch = 0; ch < c.C; ++ch)
        for (int rr = 0; rr < 3; ++rr)
          for (int ss = 0; ss < 3; ++ss) {
            double mag = 0;
            for (int64_t n = 0; n < c.N; ++n)
              for (int64_t th = 0; th < TH; ++th)
                for (int64_t tw = 0; tw < TW; ++tw)
                  for (int a = 0; a < 2; ++a)
                    for (int b = 0; b < 2; ++b) {
                      const double dv = D(n, o, 2 * th + a, 2 * tw + b);
                      if (dv == 0) continue;
                      for (int q1 = 0; q1 < 4; ++q1)
                        for (int q2 = 0; q2 < 4; ++q2)
                          mag += c1[rr][a][q1] * c1[ss][b][q2] * dv *
                                 X(n, ch, 2 * th - c.pad + q1, 2 * tw - c.pad + q2);
                    }
            const size_t i = size_t(((o * c.C + ch) * 3 + rr) * 3 + ss);
            ASSERT_LE(std::abs(static_cast<double>(got[0][i]) - dw[i]), double(T + 10) * u * mag)
                << "dw[" << o << "][" << ch << "][" << rr << "][" << ss << "]: " << got[0][i] << " against " << dw[i];
          }
    if (c.bias)
      for (int64_t o = 0; o < c.K; ++o) {
        double mag = 0;
        for (int64_t n = 0; n < c.N; ++n)
          for (int64_t i = 0; i < yhw; ++i) mag += std::abs(dyd[size_t((n * c.K + o) * yhw + i)]);
        ASSERT_LE(std::abs(static_cast<double>(got[1][size_t(o)]) - db[size_t(o)]), double(c.N * yhw) * u * mag)
            << "db[" << o << "]";
      }
    // x and dy stored as bf16 (a bf16 graph on a CPU that computes its
    // convolutions in f32): the bits of the f32 kernel above on the same
    // values widened, so the bound above holds for it too.
    std::vector<float> xr = to_blocked(x, c.N, c.C, xhw), dyr = to_blocked(dy, c.N, c.K, yhw);
    for (float& v : xr) v = kernels::round_bf16(v);
    for (float& v : dyr) v = kernels::round_bf16(v);
    auto packed = [](const std::vector<float>& f) {  // bf16 values in a float vector's bytes
      std::vector<float> b((f.size() + 1) / 2);
      auto* h = reinterpret_cast<kernels::bf16_t*>(b.data());
      for (size_t i = 0; i < f.size(); ++i) h[i] = kernels::f32_to_bf16(f[i]);
      return b;
    };
    auto k16 = kernels::cpu::make_conv2d_bwd_weight_winograd(p, true);
    ASSERT_TRUE(k16);
    EXPECT_EQ(std::string(k16->name()), "cpu.conv2d_bwd_weight_winograd2.bf16");
    const auto want = blk::run_kernel(*k, {xr, dyr}, sizes);
    const auto got16 = blk::run_kernel(*k16, {packed(xr), packed(dyr)}, sizes);
    for (size_t o = 0; o < sizes.size(); ++o)
      for (size_t i = 0; i < sizes[o]; ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(got16[o][i]), std::bit_cast<uint32_t>(want[o][i]))
            << (o ? "db[" : "dw[") << i << "]: " << got16[o][i] << " against " << want[o][i];
  }
  // Shapes it does not take (the same as the forward's).
  kernels::ConvParams q{2, 32, 8, 8, 32, 5, 5, 6, 6};
  EXPECT_FALSE(kernels::cpu::make_conv2d_bwd_weight_winograd(q));
}

// Which values the lowering keeps blocked: a conv -> batch norm -> relu ->
// conv chain is blocked end to end; a value that reaches a consumer without
// a blocked kernel (flatten's view, a linear layer), or whose channel count is
// not a multiple of 16, stays plain, together with every value an element-wise
// op links to it; graph outputs stay plain.
TEST(CpuKernels, BlockedLayoutChoice) {
  using kernels::cpu::Layout;
  Graph g;
  Builder b(g);
  ValueId x = g.input("x", {2, 3, 8, 8});
  ValueId c1 = conv2d(b, x, 16, 3, {.pad = 1, .bias = false, .name = "c1"});
  ValueId n1 = batch_norm(b, c1, {.name = "bn1"});
  ValueId r1 = relu(b, n1);
  ValueId c2 = conv2d(b, r1, 32, 3, {.pad = 1, .bias = false, .name = "c2"});
  ValueId r2 = relu(b, c2);  // read by flatten: plain, and so is c2
  ValueId c3 = conv2d(b, r1, 8, 1, {.bias = false, .name = "c3"});  // 8 channels: plain
  ValueId y = add(b, linear(b, flatten(b, r2), 10, {.name = "fc"}),
                  linear(b, flatten(b, c3), 10, {.name = "fc3"}));
  g.value(y).is_output = true;
  const auto L = cpu_layouts(g);
  auto at = [&](ValueId v) { return L[static_cast<size_t>(v)]; };
  EXPECT_EQ(at(x), Layout::Plain);
  EXPECT_EQ(at(c1), Layout::Blocked16);
  EXPECT_EQ(at(n1), Layout::Blocked16);
  EXPECT_EQ(at(r1), Layout::Blocked16);
  EXPECT_EQ(at(c2), Layout::Plain);
  EXPECT_EQ(at(r2), Layout::Plain);
  EXPECT_EQ(at(c3), Layout::Plain);
  expect_kernel(g, "batch_norm", "cpu.batch_norm.blk16");
  {
    // The off switch is a config option: a lowering context with it makes
    // every value plain, and an executor with it runs the plain kernels.
    LowerOptions off;
    off.blocked_layouts = false;
    const LoweredGraph lg(g, device_for(Backend::Cpu), off);
    EXPECT_EQ(cpu_layout(lg, c1), Layout::Plain);
    ExecConfig cfg;
    cfg.blocked_layouts = false;
    Executor ex(g, cfg);
    for (size_t k = 0; k < g.num_nodes(); ++k)
      EXPECT_EQ(std::string(ex.kernel_name(k)).find("blk16"), std::string::npos) << ex.kernel_name(k);
  }
  // The whole graph, blocked where chosen, against the reference.
  std::vector<ValueId> read{y};
  Feed f = random_feed(g, 93);
  Outputs cpu = run_on(g, Backend::Cpu, f, read);
  Outputs ref = run_on(g, Backend::Reference, f, read);
  double mx = 0;
  for (float r : ref.f32[y]) mx = std::max(mx, static_cast<double>(std::abs(r)));
  expect_close("y", cpu.f32[y], ref.f32[y], std::vector<double>(ref.f32[y].size(), 1e-4 * mx));
}
