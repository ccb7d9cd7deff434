// The fast CPU kernels with bf16 activation storage (act = ElemType::BF16),
// kernel by kernel, against the reference kernels (ops/<family>/ref.hpp) as oracle.
//
// Each case draws random inputs and rounds the activations (and the conv /
// linear weights) to bf16, so that both sides see the same exact values. The
// bf16 kernel reads the activations as bf16 and the parameters as f32 (it
// rounds the conv/linear weights itself); the oracle is the reference kernel
// run in double (float where the f32 kernel's own arithmetic is the
// specification: dropout, scale) on those values, its bf16 outputs then
// rounded to bf16. Every kernel runs with guard bytes after each output and
// its scratch, and with outputs pre-filled with NaN, so a write past a buffer
// or a skipped element fails.
//
// Tolerances. A bf16 ulp is 2^-8..2^-7 of the value (8 significant bits).
//  - Selections and copies (relu, relu_bwd, max pool y, dropout, scale with
//    the f32 kernel's arithmetic): exact.
//  - Element-wise arithmetic (add, global-pool backward, loss gradient): one
//    bf16 ulp: the kernel's f32 result and the oracle's double result may lie
//    on either side of a rounding boundary.
//  - Reductions (conv, linear, pooling sums, batch norm): the kernel sums in
//    f32 in its own order, the oracle in double; both round once to bf16:
//        |got - want| <= 2^-7 |want| + 1e-5 * sum|term|
//    2^-7 |want| covers the two roundings (at most one ulp apart when the f32
//    sum is close), 1e-5 sum|term| (sum|term| from the oracle run on
//    |inputs|, as in test_cpu_kernels.cpp) covers f32 accumulation in any
//    order for the sizes here (< 10^5 terms), while a missing or wrong term
//    is off by a whole term (~ sum|term| / terms, >= 1e-3 of it here).
//  - f32 outputs (dw, db, dgamma, dbeta, statistics): the f32 kernels'
//    tolerances of test_cpu_kernels.cpp: 1e-5 of sum|term|.
#include <gtest/gtest.h>
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "kernel_cases.hpp"
#include "kernels/bf16.hpp"
#include "kernels/cpu/engine.hpp"
#include "kernels/cpu/layout.hpp"
#include "kernels/kernel.hpp"
#include "ops/batchnorm/cpu.hpp"
#include "ops/batchnorm/ref.hpp"
#include "ops/conv/cpu.hpp"
#include "ops/conv/ref.hpp"
#include "ops/dropout/cpu.hpp"
#include "ops/dropout/ref.hpp"
#include "ops/eltwise/cpu.hpp"
#include "ops/eltwise/ref.hpp"
#include "ops/linear/cpu.hpp"
#include "ops/linear/ref.hpp"
#include "ops/loss/cpu.hpp"
#include "ops/loss/ref.hpp"
#include "ops/pool/cpu.hpp"
#include "ops/pool/ref.hpp"

using namespace memfit;
using namespace memfit::kernels;
using cpu::Layout;
using memfit::testing::ConvCase;
using memfit::testing::conv_str;
using memfit::testing::to_blocked;
using memfit::testing::to_plain;

namespace {

constexpr ElemType BF16 = ElemType::BF16;
constexpr double kRel = 1.0 / 128;  // 2^-7: bf16 output rounding (see the top)
constexpr double kSum = 1e-5;       // f32 accumulation, relative to sum |term|

// oneDNN 2.6 builds bf16 compute primitives only with AVX-512 (avx512_core;
// an AVX2-only CPU, or ONEDNN_MAX_CPU_ISA=AVX2, has none). There the bf16
// factories must return no kernel, so that the executor runs bf16 nodes as
// their f32 kernels between conversions (test_precision checks that path);
// the cases below that need oneDNN's bf16 primitives then skip, saying why.
bool onednn_bf16() { return cpu::onednn_bf16_compute(); }
#define REQUIRE_ONEDNN_BF16()                                                                                   \
  do {                                                                                                          \
    if (!onednn_bf16()) {                                                                                       \
      EXPECT_EQ(cpu::make_relu({64}, BF16), nullptr) << "a bf16 kernel was made without oneDNN bf16 support";   \
      EXPECT_EQ(cpu::make_linear({4, 16, 16, true}, BF16), nullptr);                                           \
      GTEST_SKIP() << "oneDNN has no bf16 compute on this CPU (ISA "                                            \
                   << cpu::machine_info().onednn_isa                                                            \
                   << "): bf16 nodes run as f32 kernels between conversions, checked by test_precision";       \
    }                                                                                                           \
  } while (0)

constexpr size_t kGuard = 64;

// ---------------------------------------------------------------- buffers

// A kernel operand: its bytes, followed by kGuard guard bytes.
struct Mem {
  std::vector<std::byte> b;
  size_t size = 0;
  void* ptr() { return b.data(); }
};

Mem alloc(size_t bytes, std::byte fill) {
  Mem m;
  m.size = bytes;
  m.b.assign(bytes + kGuard, std::byte{0xA5});
  std::fill(m.b.begin(), m.b.begin() + static_cast<std::ptrdiff_t>(bytes), fill);
  return m;
}
// An output: NaN in f32 and in bf16 (all bits set) until written.
Mem out_f32(size_t n) { return alloc(n * 4, std::byte{0xFF}); }
Mem out_bf16(size_t n) { return alloc(n * 2, std::byte{0xFF}); }
Mem out_u8(size_t n) { return alloc(n, std::byte{0xEE}); }

Mem mem_f32(const std::vector<float>& v) {
  Mem m = alloc(v.size() * 4, std::byte{0});
  std::memcpy(m.ptr(), v.data(), v.size() * 4);
  return m;
}
// v must hold bf16 values (checked).
Mem mem_bf16(const std::vector<float>& v) {
  Mem m = alloc(v.size() * 2, std::byte{0});
  auto* p = static_cast<bf16_t*>(m.ptr());
  for (size_t i = 0; i < v.size(); ++i) {
    p[i] = f32_to_bf16(v[i]);
    EXPECT_EQ(bf16_to_f32(p[i]), v[i]) << "input not bf16-exact";
  }
  return m;
}
template <class T>
Mem mem_of(const std::vector<T>& v) {
  Mem m = alloc(v.size() * sizeof(T), std::byte{0});
  std::memcpy(m.ptr(), v.data(), v.size() * sizeof(T));
  return m;
}

std::vector<float> read_f32(Mem& m) {
  std::vector<float> v(m.size / 4);
  std::memcpy(v.data(), m.ptr(), m.size);
  return v;
}
std::vector<float> read_bf16(Mem& m) {
  std::vector<float> v(m.size / 2);
  const auto* p = static_cast<const bf16_t*>(m.ptr());
  for (size_t i = 0; i < v.size(); ++i) v[i] = bf16_to_f32(p[i]);
  return v;
}
std::vector<uint8_t> read_u8(Mem& m) {
  std::vector<uint8_t> v(m.size);
  std::memcpy(v.data(), m.ptr(), m.size);
  return v;
}

bool guard_ok(const Mem& m) {
  for (size_t i = 0; i < kGuard; ++i)
    if (m.b[m.size + i] != std::byte{0xA5}) return false;
  return true;
}

StepContext test_ctx() {
  StepContext ctx;
  ctx.seed = 1234;
  ctx.step = 3;
  ctx.micro = 1;
  ctx.row0 = 1;
  return ctx;
}

// Binds k to the operands (with a guarded scratch), runs it `times` times and
// checks that nothing was written past an output or the scratch.
void run_cpu(Kernel& k, std::vector<Mem*> ins, std::vector<Mem*> outs, int times = 1) {
  Mem scratch = alloc(k.scratch_bytes(), std::byte{0x5A});
  std::vector<void*> ip, op;
  for (Mem* m : ins) ip.push_back(m->ptr());
  for (Mem* m : outs) op.push_back(m->ptr());
  k.bind(ip, op, k.scratch_bytes() ? scratch.ptr() : nullptr);
  for (int t = 0; t < times; ++t) k.run(test_ctx());
  for (size_t i = 0; i < outs.size(); ++i) EXPECT_TRUE(guard_ok(*outs[i])) << k.name() << " wrote past output " << i;
  EXPECT_TRUE(guard_ok(scratch)) << k.name() << " wrote past its scratch";
}

// Runs a reference kernel on plain vectors (any element types).
void run_ref(Kernel&& k, std::vector<void*> ins, std::vector<void*> outs) {
  k.bind(std::move(ins), std::move(outs), nullptr);
  k.run(test_ctx());
}

// ---------------------------------------------------------------- values

// The arguments printed one after another (for traces).
template <class... A>
std::string cat(const A&... a) {
  std::ostringstream o;
  (o << ... << a);
  return o.str();
}

float bf(double v) { return round_bf16(static_cast<float>(v)); }

std::vector<float> rand_f32(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  return memfit::testing::random_floats(n, seed, lo, hi);
}
// The same values rounded to bf16.
std::vector<float> rand_bf16(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v = rand_f32(n, seed, lo, hi);
  for (float& x : v) x = round_bf16(x);
  return v;
}
std::vector<double> dbl(const std::vector<float>& v) { return {v.begin(), v.end()}; }
std::vector<double> dabs(const std::vector<float>& v) {
  std::vector<double> d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = std::abs(static_cast<double>(v[i]));
  return d;
}
std::vector<float> to_bf16(const std::vector<double>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = bf(v[i]);
  return r;
}

// Spacing of bf16 values at |v| (the ulp of v's binade).
double ulp_bf16(double v) {
  int e = 0;
  std::frexp(std::abs(v), &e);  // |v| = m 2^e, m in [0.5, 1)
  return std::ldexp(1.0, std::max(e, -125) - 8);
}

// Per check of the running test: elements, exact matches, the largest
// difference in bf16 ulps of the expected value and as a fraction of the
// tolerance. Printed (and cleared) by print_summary() at the end of a test.
struct CheckStats {
  size_t n = 0, exact = 0;
  double max_ulps = 0, max_tol_frac = 0;
};
std::vector<std::pair<std::string, CheckStats>>& summary() {
  static std::vector<std::pair<std::string, CheckStats>> s;
  return s;
}
CheckStats& stats_of(const std::string& what) {
  for (auto& [k, v] : summary())
    if (k == what) return v;
  summary().emplace_back(what, CheckStats{});
  return summary().back().second;
}
void print_summary() {
  for (auto& [k, v] : summary())
    std::printf("    %-18s %9zu elements, %6.2f%% exact, max %.3g ulp, max %.3f of the tolerance\n", k.c_str(), v.n,
                100.0 * static_cast<double>(v.exact) / static_cast<double>(std::max<size_t>(v.n, 1)), v.max_ulps,
                v.max_tol_frac);
  summary().clear();
}

// |got - want| <= tol[i] for every element; got must be finite where want is.
void expect_within(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                   const std::function<double(size_t)>& tol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  CheckStats& st = stats_of(what);
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
    const bool same_nan = std::isnan(got[i]) && std::isnan(want[i]);
    const double t = tol(i);
    if (!same_nan && !(d <= t)) {
      if (++bad <= 5)
        ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << " want " << want[i] << " diff " << d << " > tol "
                      << t;
    }
    ++st.n;
    if (d == 0 || same_nan) ++st.exact;
    if (std::isfinite(d)) {
      st.max_ulps = std::max(st.max_ulps, d / ulp_bf16(want[i]));
      if (t > 0) st.max_tol_frac = std::max(st.max_tol_frac, d / t);
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements differ";
}
void expect_exact(const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
  expect_within(what, got, want, [](size_t) { return 0.0; });
}
void expect_ulp(const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
  expect_within(what, got, want, [&](size_t i) { return ulp_bf16(want[i]); });
}
// Reduction with bf16 output: kRel |want| + kSum mag.
void expect_sum_bf16(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                     const std::vector<double>& mag) {
  expect_within(what, got, want, [&](size_t i) { return kRel * std::abs(want[i]) + kSum * mag[i]; });
}
// Reduction with f32 output: kSum mag.
void expect_sum_f32(const std::string& what, const std::vector<float>& got, const std::vector<double>& want,
                    const std::vector<double>& mag) {
  std::vector<float> w(want.begin(), want.end());
  expect_within(what, got, w, [&](size_t i) { return kSum * mag[i] + 1e-30; });
}

// ---------------------------------------------------------------- layouts

std::vector<float> in_layout(const std::vector<float>& p, Layout l, int64_t N, int64_t C, int64_t HW) {
  return l == Layout::Plain ? p : to_blocked(p, N, C, HW);
}
std::vector<float> from_layout(const std::vector<float>& v, Layout l, int64_t N, int64_t C, int64_t HW) {
  return l == Layout::Plain ? v : to_plain(v, N, C, HW);
}
const char* lname(Layout l) { return l == Layout::Plain ? "plain" : "blocked16"; }

// ---------------------------------------------------------------- conv2d


ConvParams conv_params(const ConvCase& c) {
  auto o = [&](int64_t in, int64_t k) { return (in + 2 * c.pad - c.dil * (k - 1) - 1) / c.stride + 1; };
  ConvParams p{c.N, c.C, c.H, c.W, c.K, c.R, c.S, o(c.H, c.R), o(c.W, c.S)};
  p.stride_h = p.stride_w = c.stride;
  p.pad_h = p.pad_w = c.pad;
  p.dil_h = p.dil_w = c.dil;
  p.groups = c.groups;
  p.bias = c.bias;
  return p;
}

const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> cases = {
      {1, 3, 7, 9, 4, 3, 3, 1, 1},                 // odd sizes, batch 1
      {3, 4, 9, 7, 6, 3, 3, 2, 1, 1, 1, false},    // stride 2, no bias
      {2, 3, 11, 10, 5, 3, 3, 1, 2, 2},            // dilation 2
      {2, 4, 8, 8, 6, 3, 3, 1, 1, 1, 2},           // groups 2
      {2, 8, 9, 9, 8, 3, 3, 2, 1, 1, 8},           // depthwise, stride 2
      {3, 16, 5, 5, 32, 1, 1},                     // 1x1
      {2, 1, 28, 28, 8, 5, 5, 1, 2},               // ConvNet conv1
      {2, 32, 14, 14, 64, 5, 5, 1, 2},             // ConvNet conv2
      {2, 16, 8, 8, 32, 1, 1, 2, 0, 1, 1, false},  // ResNet downsample
      {1, 5, 6, 13, 7, 3, 5, 1, 0, 1, 1},          // non-square kernel
      {2, 3, 16, 16, 64, 7, 7, 2, 3, 1, 1, false}, // ResNet stem
      {2, 64, 8, 8, 64, 3, 3, 1, 1, 1, 1, false},  // ResNet basic block
      {2, 32, 9, 9, 32, 3, 3, 2, 1, 1, 32, true},  // depthwise, blockable
      {2, 32, 7, 7, 64, 3, 3, 1, 2, 2, 2, false},  // dilated, 2 groups
  };
  return cases;
}

// The inputs of one conv case and the oracle's results (double, on the
// bf16-exact values, conv weights pre-rounded) with their magnitudes.
struct ConvData {
  ConvParams p;
  int64_t xhw, yhw;
  size_t nx, ny, nw, nb;
  std::vector<float> x, w, wr, b, dy;  // wr: w rounded to bf16
  std::vector<double> y, dx, dw, db;   // oracle
  std::vector<double> my, mdx, mdw, mdb;
};

ConvData conv_data(const ConvCase& c, uint64_t seed) {
  ConvData d;
  d.p = conv_params(c);
  const ConvParams& p = d.p;
  d.xhw = p.H * p.W;
  d.yhw = p.OH * p.OW;
  d.nx = static_cast<size_t>(p.N * p.C * d.xhw);
  d.ny = static_cast<size_t>(p.N * p.K * d.yhw);
  d.nw = static_cast<size_t>(p.K * (p.C / p.groups) * p.R * p.S);
  d.nb = static_cast<size_t>(p.K);
  d.x = rand_bf16(d.nx, seed);
  d.w = rand_f32(d.nw, seed + 1);
  d.b = rand_f32(d.nb, seed + 2);
  d.dy = rand_bf16(d.ny, seed + 3);
  d.wr.resize(d.nw);
  for (size_t i = 0; i < d.nw; ++i) d.wr[i] = round_bf16(d.w[i]);
  auto fwd = [&](std::vector<double> x, std::vector<double> w, std::vector<double> b) {
    std::vector<double> y(d.ny);
    run_ref(ref::Conv2d<double>(p), {x.data(), w.data(), b.data()}, {y.data()});
    return y;
  };
  auto bwd_data = [&](std::vector<double> dy, std::vector<double> w) {
    std::vector<double> dx(d.nx);
    run_ref(ref::Conv2dBwdData<double>(p), {dy.data(), w.data()}, {dx.data()});
    return dx;
  };
  auto bwd_w = [&](std::vector<double> x, std::vector<double> dy, std::vector<double>& dw, std::vector<double>& db) {
    dw.assign(d.nw, 0.0);
    db.assign(d.nb, 0.0);
    run_ref(ref::Conv2dBwdWeight<double>(p), {x.data(), dy.data()}, {dw.data(), db.data()});
  };
  d.y = fwd(dbl(d.x), dbl(d.wr), dbl(d.b));
  d.my = fwd(dabs(d.x), dabs(d.wr), dabs(d.b));
  d.dx = bwd_data(dbl(d.dy), dbl(d.wr));
  d.mdx = bwd_data(dabs(d.dy), dabs(d.wr));
  bwd_w(dbl(d.x), dbl(d.dy), d.dw, d.db);
  bwd_w(dabs(d.x), dabs(d.dy), d.mdw, d.mdb);
  return d;
}

TEST(CpuBf16, Conv2d) {
  REQUIRE_ONEDNN_BF16();
  for (const ConvCase& c : conv_cases()) {
    SCOPED_TRACE(conv_str(c));
    const ConvData d = conv_data(c, 11);
    const ConvParams& p = d.p;
    for (Layout xl : {Layout::Plain, Layout::Blocked16}) {
      if (xl == Layout::Blocked16 && c.C % 16) continue;
      for (Layout yl : {Layout::Plain, Layout::Blocked16}) {
        if (yl == Layout::Blocked16 && c.K % 16) continue;
        SCOPED_TRACE(std::string("x ") + lname(xl) + ", y " + lname(yl));
        {
          auto k = cpu::make_conv2d(p, xl, yl, BF16);
          ASSERT_TRUE(k);
          EXPECT_STREQ(k->name(), "dnnl.conv2d.bf16");
          Mem x = mem_bf16(in_layout(d.x, xl, p.N, p.C, d.xhw)), w = mem_f32(d.w), b = mem_f32(d.b),
              y = out_bf16(d.ny);
          std::vector<Mem*> ins{&x, &w};
          if (c.bias) ins.push_back(&b);
          run_cpu(*k, ins, {&y});
          expect_sum_bf16("y", from_layout(read_bf16(y), yl, p.N, p.K, d.yhw), to_bf16(d.y), d.my);
          EXPECT_EQ(read_f32(w), d.w) << "the f32 weights must stay untouched";
        }
        {
          auto k = cpu::make_conv2d_bwd_data(p, yl, xl, BF16);
          ASSERT_TRUE(k);
          Mem dy = mem_bf16(in_layout(d.dy, yl, p.N, p.K, d.yhw)), w = mem_f32(d.w), dx = out_bf16(d.nx);
          run_cpu(*k, {&dy, &w}, {&dx});
          expect_sum_bf16("dx", from_layout(read_bf16(dx), xl, p.N, p.C, d.xhw), to_bf16(d.dx), d.mdx);
        }
        {
          auto k = cpu::make_conv2d_bwd_weight(p, xl, yl, BF16);
          ASSERT_TRUE(k);
          Mem x = mem_bf16(in_layout(d.x, xl, p.N, p.C, d.xhw)), dy = mem_bf16(in_layout(d.dy, yl, p.N, p.K, d.yhw)),
              dw = out_f32(d.nw), db = out_f32(d.nb);
          std::vector<Mem*> outs{&dw};
          if (c.bias) outs.push_back(&db);
          run_cpu(*k, {&x, &dy}, outs);
          expect_sum_f32("dw", read_f32(dw), d.dw, d.mdw);
          if (c.bias) expect_sum_f32("db", read_f32(db), d.db, d.mdb);
        }
      }
    }
  }
  print_summary();
}

// Blocked16 bf16 activations are oneDNN's own layout for these convolutions:
// the kernel reorders only the weights, so its scratch is never larger than
// the plain kernel's, and where the plain kernel reorders its activations
// (oneDNN's AVX-512 convolutions, which compute in blocked layouts) it is
// smaller by at least the blocked copies of x and y. With AMX, oneDNN's
// brgemm convolutions read plain activations as they are: then neither
// kernel copies them and the two scratches are equal.
TEST(CpuBf16, Conv2dBlockedNeedsNoReorder) {
  REQUIRE_ONEDNN_BF16();
  for (const ConvCase& c : {ConvCase{2, 64, 8, 8, 64, 3, 3, 1, 1, 1, 1, false},
                            ConvCase{2, 32, 14, 14, 64, 3, 3, 2, 1, 1, 1, false},
                            ConvCase{2, 64, 8, 8, 128, 1, 1, 2, 0, 1, 1, false}}) {
    SCOPED_TRACE(conv_str(c));
    const ConvParams p = conv_params(c);
    const size_t bx = static_cast<size_t>(p.N * p.C * p.H * p.W) * 2, by = static_cast<size_t>(p.N * p.K * p.OH * p.OW) * 2;
    auto fp = cpu::make_conv2d(p, Layout::Plain, Layout::Plain, BF16);
    auto fb = cpu::make_conv2d(p, Layout::Blocked16, Layout::Blocked16, BF16);
    auto dp = cpu::make_conv2d_bwd_data(p, Layout::Plain, Layout::Plain, BF16);
    auto db = cpu::make_conv2d_bwd_data(p, Layout::Blocked16, Layout::Blocked16, BF16);
    auto wp = cpu::make_conv2d_bwd_weight(p, Layout::Plain, Layout::Plain, BF16);
    auto wb = cpu::make_conv2d_bwd_weight(p, Layout::Blocked16, Layout::Blocked16, BF16);
    ASSERT_TRUE(fp && fb && dp && db && wp && wb);
    for (const auto& [plain, blocked, what] : {std::tuple{fp.get(), fb.get(), "forward"},
                                               std::tuple{dp.get(), db.get(), "backward data"},
                                               std::tuple{wp.get(), wb.get(), "backward weights"}}) {
      const size_t sp = plain->scratch_bytes(), sb = blocked->scratch_bytes();
      EXPECT_LE(sb, sp) << what;
      if (sp != sb) EXPECT_GE(sp, sb + bx + by) << what << ": the plain kernel copies x and y, the blocked one must not";
    }
  }
}

// ---------------------------------------------------------------- linear

struct LinearCase {
  int64_t M, K, N;
  bool bias;
};

TEST(CpuBf16, Linear) {
  REQUIRE_ONEDNN_BF16();
  for (const LinearCase& c : {LinearCase{5, 7, 3, true}, LinearCase{6, 4, 6, false}, LinearCase{1, 9, 5, true},
                              LinearCase{64, 3136, 1024, true}, LinearCase{64, 1024, 10, true},
                              LinearCase{17, 33, 1, false}, LinearCase{64, 512, 10, true}}) {
    SCOPED_TRACE(cat("M", c.M, " K", c.K, " N", c.N));
    const LinearParams p{c.M, c.K, c.N, c.bias};
    const size_t nx = static_cast<size_t>(c.M * c.K), ny = static_cast<size_t>(c.M * c.N),
                 nw = static_cast<size_t>(c.N * c.K), nb = static_cast<size_t>(c.N);
    const std::vector<float> x = rand_bf16(nx, 21), w = rand_f32(nw, 22), b = rand_f32(nb, 23), dy = rand_bf16(ny, 24);
    std::vector<float> wr(nw);
    for (size_t i = 0; i < nw; ++i) wr[i] = round_bf16(w[i]);
    auto fwd = [&](std::vector<double> xs, std::vector<double> ws, std::vector<double> bs) {
      std::vector<double> y(ny);
      run_ref(ref::Linear<double>(p), {xs.data(), ws.data(), bs.data()}, {y.data()});
      return y;
    };
    auto bwd_data = [&](std::vector<double> dys, std::vector<double> ws) {
      std::vector<double> dx(nx);
      run_ref(ref::LinearBwdData<double>(p), {dys.data(), ws.data()}, {dx.data()});
      return dx;
    };
    auto bwd_w = [&](std::vector<double> xs, std::vector<double> dys, std::vector<double>& dw, std::vector<double>& db) {
      dw.assign(nw, 0.0);
      db.assign(nb, 0.0);
      run_ref(ref::LinearBwdWeight<double>(p), {xs.data(), dys.data()}, {dw.data(), db.data()});
    };
    {
      auto k = cpu::make_linear(p, BF16);
      ASSERT_TRUE(k);
      EXPECT_STREQ(k->name(), "dnnl.linear.bf16");
      Mem mx = mem_bf16(x), mw = mem_f32(w), mb = mem_f32(b), my = out_bf16(ny);
      std::vector<Mem*> ins{&mx, &mw};
      if (c.bias) ins.push_back(&mb);
      run_cpu(*k, ins, {&my}, 2);
      expect_sum_bf16("y", read_bf16(my), to_bf16(fwd(dbl(x), dbl(wr), dbl(b))), fwd(dabs(x), dabs(wr), dabs(b)));
      EXPECT_EQ(read_f32(mw), w) << "the f32 weights must stay untouched";
    }
    {
      auto k = cpu::make_linear_bwd_data(p, BF16);
      ASSERT_TRUE(k);
      Mem mdy = mem_bf16(dy), mw = mem_f32(w), mdx = out_bf16(nx);
      run_cpu(*k, {&mdy, &mw}, {&mdx});
      expect_sum_bf16("dx", read_bf16(mdx), to_bf16(bwd_data(dbl(dy), dbl(wr))), bwd_data(dabs(dy), dabs(wr)));
    }
    {
      auto k = cpu::make_linear_bwd_weight(p, BF16);
      ASSERT_TRUE(k);
      Mem mx = mem_bf16(x), mdy = mem_bf16(dy), mdw = out_f32(nw), mdb = out_f32(nb);
      std::vector<Mem*> outs{&mdw};
      if (c.bias) outs.push_back(&mdb);
      run_cpu(*k, {&mx, &mdy}, outs);
      std::vector<double> dw, db, mdw_, mdb_;
      bwd_w(dbl(x), dbl(dy), dw, db);
      bwd_w(dabs(x), dabs(dy), mdw_, mdb_);
      expect_sum_f32("dw", read_f32(mdw), dw, mdw_);
      if (c.bias) expect_sum_f32("db", read_f32(mdb), db, mdb_);
    }
  }
  print_summary();
}

// ---------------------------------------------------------------- batch norm

// Oracle tolerances as in test_cpu_kernels.cpp (BatchNormForward/Backward),
// plus kRel |want| for the bf16 outputs y and dx.
TEST(CpuBf16, BatchNorm) {
  REQUIRE_ONEDNN_BF16();
  for (std::vector<int64_t> xs : {std::vector<int64_t>{3, 32, 5, 7}, {2, 16, 2, 2}, {8, 64, 28, 28},
                                  {4, 48, 1, 1}, {3, 5, 7, 9}, {4, 6, 1, 1}}) {
    const int64_t N = xs[0], C = xs[1], HW = xs[2] * xs[3];
    const size_t n = static_cast<size_t>(N * C * HW), nc = static_cast<size_t>(C);
    for (int training : {1, 0}) {
      for (Layout l : {Layout::Plain, Layout::Blocked16}) {
        if (l == Layout::Blocked16 && C % 16) continue;
        SCOPED_TRACE(cat("N", N, " C", C, " HW", HW, training ? " training " : " eval ", lname(l)));
        BatchNormParams p{N, C, HW};
        p.training = training != 0;
        std::vector<float> x = rand_bf16(n, 31, -1.5f, 2.5f), dy = rand_bf16(n, 32);
        const std::vector<float> gamma = rand_f32(nc, 33), beta = rand_f32(nc, 34), rm0 = rand_f32(nc, 35),
                                 rv0 = rand_f32(nc, 36, 0.5f, 1.5f);
        // Oracle forward.
        std::vector<double> xd = dbl(x), g = dbl(gamma), bt = dbl(beta), rm = dbl(rm0), rv = dbl(rv0), y(n), mean(nc),
                            var(nc);
        run_ref(ref::BatchNorm<double>(p), {xd.data(), g.data(), bt.data(), rm.data(), rv.data()},
                {y.data(), mean.data(), var.data()});
        // Per-channel magnitudes.
        std::vector<double> amean(nc, 0.0), tm(nc), tv(nc), ty(n);
        for (int64_t b = 0; b < N; ++b)
          for (int64_t c = 0; c < C; ++c)
            for (int64_t i = 0; i < HW; ++i) amean[c] += std::abs(x[(b * C + c) * HW + i]) / double(N * HW);
        for (int64_t c = 0; c < C; ++c) {
          tm[c] = amean[c];
          tv[c] = var[c] + mean[c] * mean[c] + amean[c] * amean[c];
          const double inv = 1.0 / std::sqrt(var[c] + 1e-5);
          for (int64_t b = 0; b < N; ++b)
            for (int64_t i = 0; i < HW; ++i) {
              const size_t k = static_cast<size_t>((b * C + c) * HW + i);
              ty[k] = (std::abs(x[k] - mean[c]) + amean[c]) * std::abs(gamma[c]) * inv * (1.0 + kSum * tv[c] * inv * inv) +
                      std::abs(beta[c]);
            }
        }
        auto kf = cpu::make_batch_norm(p, l, BF16);
        ASSERT_TRUE(kf);
        EXPECT_STREQ(kf->name(), l == Layout::Plain ? "cpu.batch_norm.bf16" : "cpu.batch_norm.blk16.bf16");
        Mem mx = mem_bf16(in_layout(x, l, N, C, HW)), mg = mem_f32(gamma), mb = mem_f32(beta), mrm = mem_f32(rm0),
            mrv = mem_f32(rv0), my = out_bf16(n), mmean = out_f32(nc), mvar = out_f32(nc);
        run_cpu(*kf, {&mx, &mg, &mb, &mrm, &mrv}, {&my, &mmean, &mvar});
        expect_sum_bf16("y", from_layout(read_bf16(my), l, N, C, HW), to_bf16(y), ty);
        expect_sum_f32("mean", read_f32(mmean), mean, tm);
        expect_sum_f32("var", read_f32(mvar), var, tv);
        std::vector<double> trm(nc), trv(nc);
        for (size_t c = 0; c < nc; ++c) {
          trm[c] = std::abs(rm0[c]) + amean[c];
          trv[c] = std::abs(rv0[c]) + tv[c];
        }
        expect_sum_f32("running_mean", read_f32(mrm), rm, trm);
        expect_sum_f32("running_var", read_f32(mrv), rv, trv);

        // Backward, from the kernel's own statistics (f32).
        const std::vector<float> smean = read_f32(mmean), svar = read_f32(mvar);
        std::vector<double> dyd = dbl(dy), md = dbl(smean), vd = dbl(svar), dx(n), dg(nc), db(nc);
        run_ref(ref::BatchNormBwd<double>(p), {xd.data(), dyd.data(), g.data(), md.data(), vd.data()},
                {dx.data(), dg.data(), db.data()});
        std::vector<double> tdx(n), tdg(nc), tdb(nc);
        const double cnt = double(N * HW);
        for (int64_t c = 0; c < C; ++c) {
          const double inv = 1.0 / std::sqrt(double(svar[c]) + 1e-5);
          double sdy = 0, sdyx = 0;
          for (int64_t b = 0; b < N; ++b)
            for (int64_t i = 0; i < HW; ++i) {
              const size_t k = static_cast<size_t>((b * C + c) * HW + i);
              sdy += std::abs(dy[k]);
              sdyx += std::abs(dy[k] * (x[k] - smean[c]) * inv);
            }
          tdb[c] = sdy;
          tdg[c] = sdyx;
          for (int64_t b = 0; b < N; ++b)
            for (int64_t i = 0; i < HW; ++i) {
              const size_t k = static_cast<size_t>((b * C + c) * HW + i);
              const double xhat = std::abs((x[k] - smean[c]) * inv);
              tdx[k] = std::abs(gamma[c]) * inv * (std::abs(dy[k]) + sdy / cnt + xhat * sdyx / cnt);
            }
        }
        auto kb = cpu::make_batch_norm_bwd(p, l, BF16);
        ASSERT_TRUE(kb);
        Mem bx = mem_bf16(in_layout(x, l, N, C, HW)), bdy = mem_bf16(in_layout(dy, l, N, C, HW)), bg = mem_f32(gamma),
            bm = mem_f32(smean), bv = mem_f32(svar), bdx = out_bf16(n), bdg = out_f32(nc), bdb = out_f32(nc);
        run_cpu(*kb, {&bx, &bdy, &bg, &bm, &bv}, {&bdx, &bdg, &bdb});
        expect_sum_bf16("dx", from_layout(read_bf16(bdx), l, N, C, HW), to_bf16(dx), tdx);
        expect_sum_f32("dgamma", read_f32(bdg), dg, tdg);
        expect_sum_f32("dbeta", read_f32(bdb), db, tdb);
      }
    }
  }
  print_summary();
}

// ---------------------------------------------------------------- element-wise

TEST(CpuBf16, Eltwise) {
  REQUIRE_ONEDNN_BF16();
  for (int64_t n : {int64_t(1), int64_t(1000), int64_t(100003)}) {
    SCOPED_TRACE(cat("n = ", n));
    const size_t un = static_cast<size_t>(n);
    const EltwiseParams p{n, 0.37};
    const std::vector<float> a = rand_bf16(un, 61), b = rand_bf16(un, 62, -3.0f, 3.0f);
    {  // relu: a selection, exact
      auto k = cpu::make_relu(p, BF16);
      ASSERT_TRUE(k);
      Mem x = mem_bf16(a), y = out_bf16(un);
      run_cpu(*k, {&x}, {&y});
      std::vector<float> want(un);
      run_ref(ref::Relu<float>(p), {const_cast<float*>(a.data())}, {want.data()});
      expect_exact("relu", read_bf16(y), want);
      run_cpu(*k, {&x}, {&x});  // in place
      expect_exact("relu in place", read_bf16(x), want);
    }
    {  // relu_bwd: a selection, exact
      auto k = cpu::make_relu_bwd(p, BF16);
      ASSERT_TRUE(k);
      EXPECT_STREQ(k->name(), "cpu.relu_bwd.bf16");
      Mem y = mem_bf16(a), dy = mem_bf16(b), dx = out_bf16(un);
      run_cpu(*k, {&y, &dy}, {&dx});
      std::vector<float> want(un);
      run_ref(ref::ReluBwd<float>(p), {const_cast<float*>(a.data()), const_cast<float*>(b.data())}, {want.data()});
      expect_exact("relu_bwd", read_bf16(dx), want);
      run_cpu(*k, {&y, &dy}, {&dy});  // in place
      expect_exact("relu_bwd in place", read_bf16(dy), want);
    }
    {  // add: one rounding of an exact sum, within 1 ulp of the double oracle
      auto k = cpu::make_add(p, BF16);
      ASSERT_TRUE(k);
      Mem x = mem_bf16(a), z = mem_bf16(b), y = out_bf16(un);
      run_cpu(*k, {&x, &z}, {&y});
      std::vector<double> ad = dbl(a), bd = dbl(b), want(un);
      run_ref(ref::Add<double>(p), {ad.data(), bd.data()}, {want.data()});
      expect_ulp("add", read_bf16(y), to_bf16(want));
      run_cpu(*k, {&x, &z}, {&x});  // in place
      expect_ulp("add in place", read_bf16(x), to_bf16(want));
    }
    {  // scale: the f32 product alpha x rounded once: exact against the f32 oracle,
       // within 1 ulp of the double one
      auto k = cpu::make_scale(p, BF16);
      ASSERT_TRUE(k);
      Mem x = mem_bf16(b), y = out_bf16(un);
      run_cpu(*k, {&x}, {&y});
      std::vector<float> want(un);
      run_ref(ref::Scale<float>(p), {const_cast<float*>(b.data())}, {want.data()});
      std::vector<double> bd = dbl(b), wd(un);
      run_ref(ref::Scale<double>(p), {bd.data()}, {wd.data()});
      for (float& v : want) v = round_bf16(v);
      expect_exact("scale", read_bf16(y), want);
      expect_ulp("scale (double)", read_bf16(y), to_bf16(wd));
    }
  }
  print_summary();
}

TEST(CpuBf16, Dropout) {
  REQUIRE_ONEDNN_BF16();
  for (double pr : {0.4, 0.1}) {
    const int64_t n = 100005;
    const size_t un = static_cast<size_t>(n);
    const DropoutParams p{n, pr, 987654321};
    const std::vector<float> x = rand_bf16(un, 71), dy = rand_bf16(un, 72);
    auto kf = cpu::make_dropout(p, BF16);
    auto kb = cpu::make_dropout_bwd(p, BF16);
    ASSERT_TRUE(kf && kb);
    Mem mx = mem_bf16(x), my = out_bf16(un), mm = out_u8(un);
    run_cpu(*kf, {&mx}, {&my, &mm});
    // Oracle: the f32 reference (the kernels' arithmetic is f32), rounded.
    std::vector<float> y(un), dx(un);
    std::vector<uint8_t> mask(un);
    run_ref(ref::Dropout<float>(p), {const_cast<float*>(x.data())}, {y.data(), mask.data()});
    for (float& v : y) v = round_bf16(v);
    EXPECT_EQ(read_u8(mm), mask);
    expect_exact("y", read_bf16(my), y);
    Mem mdy = mem_bf16(dy), mdx = out_bf16(un);
    run_cpu(*kb, {&mdy, &mm}, {&mdx});
    run_ref(ref::DropoutBwd<float>(p), {const_cast<float*>(dy.data()), mask.data()}, {dx.data()});
    for (float& v : dx) v = round_bf16(v);
    expect_exact("dx", read_bf16(mdx), dx);
    run_cpu(*kf, {&mx}, {&mx, &mm});  // in place
    expect_exact("y in place", read_bf16(mx), y);
  }
  print_summary();
}

// ---------------------------------------------------------------- pooling

struct PoolCase {
  int64_t N, C, H, W, R, S, sh, sw, ph, pw;
  bool include_pad = true;
};

PoolParams pool_params(const PoolCase& c) {
  PoolParams p{c.N, c.C, c.H, c.W, (c.H + 2 * c.ph - c.R) / c.sh + 1, (c.W + 2 * c.pw - c.S) / c.sw + 1, c.R, c.S};
  p.stride_h = c.sh;
  p.stride_w = c.sw;
  p.pad_h = c.ph;
  p.pad_w = c.pw;
  p.count_include_pad = c.include_pad;
  return p;
}

const std::vector<PoolCase>& pool_cases() {
  static const std::vector<PoolCase> cases = {
      {2, 3, 12, 12, 2, 2, 2, 2, 0, 0},       // ConvNet-like
      {1, 2, 7, 9, 2, 2, 2, 2, 0, 0},         // odd sizes
      {3, 4, 8, 8, 3, 3, 2, 2, 1, 1},         // padded, overlapping (ResNet max pool)
      {2, 3, 7, 9, 3, 3, 1, 1, 1, 1},         // stride 1, heavy overlap
      {2, 2, 9, 10, 2, 3, 2, 1, 1, 1},        // non-square window and stride
      {2, 3, 7, 9, 3, 3, 2, 2, 1, 1, false},  // exclude padding (avg)
      {2, 32, 14, 14, 3, 3, 2, 2, 1, 1},      // many channels
  };
  return cases;
}

// Max pooling: the inputs of each plane are distinct (a shuffled set of
// small integers / 64, exact in bf16), so the argmax is unique and both
// sides route dy the same way. y is a selection: exact. dx adds at most
// ceil(R/s) ceil(S/s) values of dy.
TEST(CpuBf16, MaxPool) {
  REQUIRE_ONEDNN_BF16();
  for (const PoolCase& c : pool_cases()) {
    SCOPED_TRACE(cat("N", c.N, " C", c.C, " ", c.H, "x", c.W, " win ", c.R, "x", c.S, " s", c.sh, ",", c.sw));
    const PoolParams p = pool_params(c);
    const int64_t plane = p.H * p.W;
    const size_t nx = static_cast<size_t>(p.N * p.C * plane), ny = static_cast<size_t>(p.N * p.C * p.OH * p.OW);
    std::vector<float> x(nx);
    std::mt19937_64 gen(81);
    std::vector<int> perm(static_cast<size_t>(plane));
    for (int64_t q = 0; q < p.N * p.C; ++q) {
      std::iota(perm.begin(), perm.end(), -static_cast<int>(plane / 2));
      std::shuffle(perm.begin(), perm.end(), gen);
      for (int64_t i = 0; i < plane; ++i) x[static_cast<size_t>(q * plane + i)] = static_cast<float>(perm[i]) / 64.0f;
    }
    const std::vector<float> dy = rand_bf16(ny, 82);
    auto kf = cpu::make_max_pool2d(p, BF16);
    auto kb = cpu::make_max_pool2d_bwd(p, BF16);
    ASSERT_TRUE(kf && kb);
    EXPECT_STREQ(kf->name(), "dnnl.max_pool2d.bf16");
    Mem mx = mem_bf16(x), my = out_bf16(ny), ws = alloc(ny * 4, std::byte{0});
    run_cpu(*kf, {&mx}, {&my, &ws});
    std::vector<double> xd = dbl(x), y(ny);
    std::vector<int32_t> idx(ny);
    run_ref(ref::MaxPool2d<double>(p), {xd.data()}, {y.data(), idx.data()});
    expect_exact("y", read_bf16(my), to_bf16(y));
    Mem mdy = mem_bf16(dy), mdx = out_bf16(nx);
    run_cpu(*kb, {&mdy, &ws}, {&mdx});
    std::vector<double> dyd = dbl(dy), dx(nx), mag(nx), ady = dabs(dy);
    run_ref(ref::MaxPool2dBwd<double>(p), {dyd.data(), idx.data()}, {dx.data()});
    run_ref(ref::MaxPool2dBwd<double>(p), {ady.data(), idx.data()}, {mag.data()});
    expect_sum_bf16("dx", read_bf16(mdx), to_bf16(dx), mag);
  }
  print_summary();
}

TEST(CpuBf16, AvgPool) {
  REQUIRE_ONEDNN_BF16();
  for (const PoolCase& c : pool_cases()) {
    SCOPED_TRACE(cat("N", c.N, " C", c.C, " ", c.H, "x", c.W, " win ", c.R, "x", c.S, " s", c.sh, ",", c.sw,
                     c.include_pad ? " incl" : " excl"));
    const PoolParams p = pool_params(c);
    const size_t nx = static_cast<size_t>(p.N * p.C * p.H * p.W), ny = static_cast<size_t>(p.N * p.C * p.OH * p.OW);
    const std::vector<float> x = rand_bf16(nx, 91), dy = rand_bf16(ny, 92);
    auto kf = cpu::make_avg_pool2d(p, BF16);
    auto kb = cpu::make_avg_pool2d_bwd(p, BF16);
    ASSERT_TRUE(kf && kb);
    Mem mx = mem_bf16(x), my = out_bf16(ny);
    run_cpu(*kf, {&mx}, {&my});
    std::vector<double> xd = dbl(x), ax = dabs(x), y(ny), my_(ny);
    run_ref(ref::AvgPool2d<double>(p), {xd.data()}, {y.data()});
    run_ref(ref::AvgPool2d<double>(p), {ax.data()}, {my_.data()});
    expect_sum_bf16("y", read_bf16(my), to_bf16(y), my_);
    Mem mdy = mem_bf16(dy), mdx = out_bf16(nx);
    run_cpu(*kb, {&mdy}, {&mdx});
    std::vector<double> dyd = dbl(dy), ady = dabs(dy), dx(nx), mdx_(nx);
    run_ref(ref::AvgPool2dBwd<double>(p), {dyd.data()}, {dx.data()});
    run_ref(ref::AvgPool2dBwd<double>(p), {ady.data()}, {mdx_.data()});
    expect_sum_bf16("dx", read_bf16(mdx), to_bf16(dx), mdx_);
  }
  print_summary();
}

// Global average pooling: y = round(sum / HW) (a reduction); dx =
// round(dy / HW) (one division: 1 ulp).
TEST(CpuBf16, GlobalAvgPool) {
  REQUIRE_ONEDNN_BF16();
  for (std::vector<int64_t> xs : {std::vector<int64_t>{2, 3, 7, 9}, {64, 512, 4, 4}, {1, 5, 1, 1}, {3, 48, 7, 7},
                                  {2, 32, 1, 1}, {2, 16, 5, 5}}) {
    const int64_t N = xs[0], C = xs[1], HW = xs[2] * xs[3];
    const size_t nx = static_cast<size_t>(N * C * HW), ny = static_cast<size_t>(N * C);
    const GlobalPoolParams p{N, C, HW};
    const std::vector<float> x = rand_bf16(nx, 101), dy = rand_bf16(ny, 102);
    std::vector<double> xd = dbl(x), ax = dabs(x), y(ny), my_(ny), dyd = dbl(dy), dx(nx);
    run_ref(ref::GlobalAvgPool<double>(p), {xd.data()}, {y.data()});
    run_ref(ref::GlobalAvgPool<double>(p), {ax.data()}, {my_.data()});
    run_ref(ref::GlobalAvgPoolBwd<double>(p), {dyd.data()}, {dx.data()});
    for (Layout l : {Layout::Plain, Layout::Blocked16}) {
      if (l == Layout::Blocked16 && C % 16) continue;
      SCOPED_TRACE(cat("N", N, " C", C, " HW", HW, " ", lname(l)));
      auto kf = cpu::make_global_avg_pool(p, l, BF16);
      auto kb = cpu::make_global_avg_pool_bwd(p, l, BF16);
      ASSERT_TRUE(kf && kb);
      Mem mx = mem_bf16(in_layout(x, l, N, C, HW)), my = out_bf16(ny);
      run_cpu(*kf, {&mx}, {&my});
      expect_sum_bf16("y", read_bf16(my), to_bf16(y), my_);
      Mem mdy = mem_bf16(dy), mdx = out_bf16(nx);
      run_cpu(*kb, {&mdy}, {&mdx});
      expect_ulp("dx", from_layout(read_bf16(mdx), l, N, C, HW), to_bf16(dx));
    }
  }
  print_summary();
}

// ---------------------------------------------------------------- loss

// Logits bf16, loss and probabilities f32: double arithmetic rounded to f32
// (1e-6 relative, as the f32 test); dlogits: the f32 value rounded to bf16
// (1 ulp of the double oracle).
TEST(CpuBf16, SoftmaxXent) {
  REQUIRE_ONEDNN_BF16();
  for (double s : {0.0, 0.1}) {
    for (std::vector<int64_t> zs : {std::vector<int64_t>{64, 10}, {3, 7}, {512, 1000}}) {
      const int64_t N = zs[0], C = zs[1];
      SCOPED_TRACE(cat("N", N, " C", C, " smoothing ", s));
      const size_t nz = static_cast<size_t>(N * C);
      const XentParams p{N, C, s};
      std::vector<float> z = rand_bf16(nz, 111, -8.0f, 8.0f);
      std::vector<int32_t> labels(static_cast<size_t>(N));
      std::mt19937 gen(112);
      for (int32_t& v : labels) v = static_cast<int32_t>(gen() % static_cast<uint32_t>(C));
      auto kf = cpu::make_softmax_xent(p, BF16);
      auto kb = cpu::make_softmax_xent_bwd(p, BF16);
      ASSERT_TRUE(kf && kb);
      Mem mz = mem_bf16(z), ml = mem_of(labels), mloss = out_f32(1), mp = out_f32(nz);
      run_cpu(*kf, {&mz, &ml}, {&mloss, &mp});
      std::vector<double> zd = dbl(z), loss(1), probs(nz);
      run_ref(ref::SoftmaxXent<double>(p), {zd.data(), labels.data()}, {loss.data(), probs.data()});
      const std::vector<float> gl = read_f32(mloss), gp = read_f32(mp);
      expect_within("loss", gl, {static_cast<float>(loss[0])}, [&](size_t) { return 1e-6 * std::abs(loss[0]); });
      expect_within("probs", gp, std::vector<float>(probs.begin(), probs.end()),
                    [&](size_t i) { return 1e-6 * std::abs(probs[i]) + 1e-38; });
      // Backward from the kernel's probabilities.
      const std::vector<float> dloss{0.7f};
      Mem mdl = mem_f32(dloss), mdz = out_bf16(nz);
      run_cpu(*kb, {&mp, &ml, &mdl}, {&mdz});
      std::vector<double> pd = dbl(gp), dl = dbl(dloss), dz(nz);
      run_ref(ref::SoftmaxXentBwd<double>(p), {pd.data(), labels.data(), dl.data()}, {dz.data()});
      expect_ulp("dlogits", read_bf16(mdz), to_bf16(dz));
    }
  }
  print_summary();
}

// ---------------------------------------------------------------- factories

TEST(CpuBf16, F32DefaultsAndOtherTypes) {
  // The default element type is f32: the kernels keep their f32 names.
  EXPECT_STREQ(cpu::make_relu_bwd({8})->name(), "cpu.relu_bwd");
  EXPECT_STREQ(cpu::make_batch_norm({2, 16, 4})->name(), "cpu.batch_norm");
  EXPECT_STREQ(cpu::make_linear({2, 3, 4, false})->name(), "dnnl.linear");
  // An element type a kernel does not implement gives nullptr.
  EXPECT_FALSE(cpu::make_relu_bwd({8}, ElemType::F64));
  EXPECT_FALSE(cpu::make_add({8}, ElemType::F64));
  EXPECT_FALSE(cpu::make_batch_norm({2, 16, 4}, Layout::Plain, ElemType::F64));
  EXPECT_FALSE(cpu::make_linear({2, 3, 4, false}, ElemType::F64));
  EXPECT_FALSE(cpu::make_conv2d(conv_params({1, 3, 7, 9, 4, 3, 3, 1, 1}), Layout::Plain, Layout::Plain, ElemType::F64));
  EXPECT_FALSE(cpu::make_softmax_xent({2, 3}, ElemType::F64));
  // Blocked16 still needs C a multiple of 16.
  EXPECT_FALSE(cpu::make_batch_norm({2, 24, 4}, Layout::Blocked16, BF16));
  EXPECT_FALSE(cpu::make_global_avg_pool({2, 24, 4}, Layout::Blocked16, BF16));
}

// ---------------------------------------------------------------- chains

// conv -> batch norm with Blocked16 bf16 activations (what the lowering
// chooses for a ResNet block) gives what the plain chain gives: the conv is
// the same oneDNN computation (plain only adds exact bf16 reorders), so y
// matches bitwise; batch norm sums in another order, so its statistics may
// differ in the last f32 bits and its output by one bf16 ulp.
TEST(CpuBf16, BlockedConvBatchNormChain) {
  REQUIRE_ONEDNN_BF16();
  const ConvCase c{4, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1, false};
  const ConvParams p = conv_params(c);
  const int64_t xhw = p.H * p.W, yhw = p.OH * p.OW;
  const size_t nx = static_cast<size_t>(p.N * p.C * xhw), ny = static_cast<size_t>(p.N * p.K * yhw),
               nw = static_cast<size_t>(p.K * p.C * p.R * p.S), nk = static_cast<size_t>(p.K);
  const std::vector<float> x = rand_bf16(nx, 121), w = rand_f32(nw, 122, -0.1f, 0.1f), gamma = rand_f32(nk, 123),
                           beta = rand_f32(nk, 124), rm = rand_f32(nk, 125), rv = rand_f32(nk, 126, 0.5f, 1.5f),
                           dz = rand_bf16(ny, 127);
  BatchNormParams bp{p.N, p.K, yhw};
  struct Result {
    std::vector<float> y, z, mean, var, dy, dx, dw, dgamma;
  };
  auto chain = [&](Layout l) {
    Result r;
    auto conv = cpu::make_conv2d(p, l, l, BF16);
    auto bn = cpu::make_batch_norm(bp, l, BF16);
    auto bnb = cpu::make_batch_norm_bwd(bp, l, BF16);
    auto cbd = cpu::make_conv2d_bwd_data(p, l, l, BF16);
    auto cbw = cpu::make_conv2d_bwd_weight(p, l, l, BF16);
    EXPECT_TRUE(conv && bn && bnb && cbd && cbw);
    if (!(conv && bn && bnb && cbd && cbw)) return r;
    Mem mx = mem_bf16(in_layout(x, l, p.N, p.C, xhw)), mw = mem_f32(w), my = out_bf16(ny);
    run_cpu(*conv, {&mx, &mw}, {&my});
    Mem mg = mem_f32(gamma), mb = mem_f32(beta), mrm = mem_f32(rm), mrv = mem_f32(rv), mz = out_bf16(ny),
        mmean = out_f32(nk), mvar = out_f32(nk);
    run_cpu(*bn, {&my, &mg, &mb, &mrm, &mrv}, {&mz, &mmean, &mvar});
    Mem mdz = mem_bf16(in_layout(dz, l, p.N, p.K, yhw)), mdy = out_bf16(ny), mdg = out_f32(nk), mdb = out_f32(nk);
    run_cpu(*bnb, {&my, &mdz, &mg, &mmean, &mvar}, {&mdy, &mdg, &mdb});
    Mem mdx = out_bf16(nx), mdw = out_f32(nw);
    run_cpu(*cbd, {&mdy, &mw}, {&mdx});
    run_cpu(*cbw, {&mx, &mdy}, {&mdw});
    r.y = from_layout(read_bf16(my), l, p.N, p.K, yhw);
    r.z = from_layout(read_bf16(mz), l, p.N, p.K, yhw);
    r.mean = read_f32(mmean);
    r.var = read_f32(mvar);
    r.dy = from_layout(read_bf16(mdy), l, p.N, p.K, yhw);
    r.dx = from_layout(read_bf16(mdx), l, p.N, p.C, xhw);
    r.dw = read_f32(mdw);
    r.dgamma = read_f32(mdg);
    return r;
  };
  const Result plain = chain(Layout::Plain), blocked = chain(Layout::Blocked16);
  expect_exact("conv y", blocked.y, plain.y);
  auto rel = [](const std::vector<float>& want, double r) {
    return [&want, r](size_t i) { return r * (std::abs(want[i]) + 1.0); };
  };
  expect_within("mean", blocked.mean, plain.mean, rel(plain.mean, 1e-5));
  expect_within("var", blocked.var, plain.var, rel(plain.var, 1e-5));
  expect_within("bn z", blocked.z, plain.z, [&](size_t i) { return ulp_bf16(plain.z[i]) + 1e-5; });
  expect_within("bn dy", blocked.dy, plain.dy, [&](size_t i) { return ulp_bf16(plain.dy[i]) + 1e-5; });
  expect_within("dgamma", blocked.dgamma, plain.dgamma, rel(plain.dgamma, 1e-4));
  // dy may differ by an ulp in places; the convs' backward then carry that on.
  double mx = 0, mw_ = 0;
  for (float v : plain.dx) mx = std::max(mx, double(std::abs(v)));
  for (float v : plain.dw) mw_ = std::max(mw_, double(std::abs(v)));
  expect_within("dx", blocked.dx, plain.dx, [&](size_t i) { return kRel * std::abs(plain.dx[i]) + 1e-3 * mx; });
  expect_within("dw", blocked.dw, plain.dw, [&](size_t) { return 1e-3 * mw_; });
  print_summary();
}

// ---------------------------------------------------------------- timing

// Not a test: times one ResNet-18 layer (N=64, C=K=64, 28x28, 3x3 pad 1)
// forward, backward-data and backward-weights, f32 against bf16, with
// activations plain and Blocked16 (what the lowering uses), on
// MEMFIT_TIMING_THREADS threads (default 2). Run with
//   test_cpu_bf16 --gtest_also_run_disabled_tests --gtest_filter='*Timing*'
TEST(CpuBf16, DISABLED_ConvTiming) {
  const char* env = std::getenv("MEMFIT_TIMING_THREADS");
  const int threads = env ? std::atoi(env) : 2;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  const ConvCase c{64, 64, 28, 28, 64, 3, 3, 1, 1, 1, 1, false};
  const ConvParams p = conv_params(c);
  const size_t nx = static_cast<size_t>(p.N * p.C * p.H * p.W), ny = static_cast<size_t>(p.N * p.K * p.OH * p.OW),
               nw = static_cast<size_t>(p.K * p.C * p.R * p.S);
  const std::vector<float> x = rand_bf16(nx, 131), dy = rand_bf16(ny, 132), w = rand_f32(nw, 133, -0.1f, 0.1f);
  auto time_ms = [](Kernel& k, std::vector<Mem*> ins, std::vector<Mem*> outs) {
    Mem scratch = alloc(k.scratch_bytes(), std::byte{0});
    std::vector<void*> ip, op;
    for (Mem* m : ins) ip.push_back(m->ptr());
    for (Mem* m : outs) op.push_back(m->ptr());
    k.bind(ip, op, k.scratch_bytes() ? scratch.ptr() : nullptr);
    k.run(test_ctx());
    std::vector<double> t;
    for (int i = 0; i < 7; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      k.run(test_ctx());
      t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  std::printf("conv N64 C64 K64 28x28 3x3 p1, %d threads, median ms of 7 runs\n", threads);
  std::printf("  %-10s %-9s %9s %9s %9s %9s\n", "type", "layout", "fwd", "bwd_data", "bwd_wei", "total");
  for (ElemType t : {ElemType::F32, BF16}) {
    for (Layout l : {Layout::Plain, Layout::Blocked16}) {
      const bool b = t == BF16;
      auto act = [&](const std::vector<float>& v, int64_t C, int64_t HW) {
        const std::vector<float> lv = in_layout(v, l, p.N, C, HW);
        return b ? mem_bf16(lv) : mem_f32(lv);
      };
      Mem mx = act(x, p.C, p.H * p.W), mdy = act(dy, p.K, p.OH * p.OW), mw = mem_f32(w);
      Mem my = b ? out_bf16(ny) : out_f32(ny), mdx = b ? out_bf16(nx) : out_f32(nx), mdw = out_f32(nw);
      auto kf = cpu::make_conv2d(p, l, l, t);
      auto kd = cpu::make_conv2d_bwd_data(p, l, l, t);
      auto kw = cpu::make_conv2d_bwd_weight(p, l, l, t);
      ASSERT_TRUE(kf && kd && kw);
      const double f = time_ms(*kf, {&mx, &mw}, {&my}), d = time_ms(*kd, {&mdy, &mw}, {&mdx}),
                   wt = time_ms(*kw, {&mx, &mdy}, {&mdw});
      std::printf("  %-10s %-9s %9.2f %9.2f %9.2f %9.2f\n", b ? "bf16" : "f32", lname(l), f, d, wt, f + d + wt);
    }
  }
  omp_set_num_threads(saved);
}

// Not a test: the memory-bound kernels on a ResNet-18 activation [64, 64,
// 28, 28], f32 against bf16 (same invocation as ConvTiming).
TEST(CpuBf16, DISABLED_MemoryBoundTiming) {
  const char* env = std::getenv("MEMFIT_TIMING_THREADS");
  const int threads = env ? std::atoi(env) : 2;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  const int64_t N = 64, C = 64, HW = 28 * 28, n = N * C * HW;
  const size_t un = static_cast<size_t>(n), uc = static_cast<size_t>(C);
  const std::vector<float> x = rand_bf16(un, 141), dy = rand_bf16(un, 142), g = rand_f32(uc, 143), b = rand_f32(uc, 144),
                           rm = rand_f32(uc, 145), rv = rand_f32(uc, 146, 0.5f, 1.5f);
  auto time_ms = [](Kernel& k, std::vector<Mem*> ins, std::vector<Mem*> outs) {
    std::vector<void*> ip, op;
    for (Mem* m : ins) ip.push_back(m->ptr());
    for (Mem* m : outs) op.push_back(m->ptr());
    Mem scratch = alloc(k.scratch_bytes(), std::byte{0});
    k.bind(ip, op, k.scratch_bytes() ? scratch.ptr() : nullptr);
    k.run(test_ctx());
    std::vector<double> t;
    for (int i = 0; i < 11; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      k.run(test_ctx());
      t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  std::printf("[64, 64, 28, 28], %d threads, median ms of 11 runs\n", threads);
  std::printf("  %-6s %-9s %8s %8s %8s %8s %8s %8s\n", "type", "layout", "bn", "bn_bwd", "relu", "relu_bwd", "add",
              "dropout");
  for (ElemType t : {ElemType::F32, BF16}) {
    for (Layout l : {Layout::Plain, Layout::Blocked16}) {
      const bool bf = t == BF16;
      auto act = [&](const std::vector<float>& v) { return bf ? mem_bf16(in_layout(v, l, N, C, HW)) : mem_f32(in_layout(v, l, N, C, HW)); };
      auto out = [&]() { return bf ? out_bf16(un) : out_f32(un); };
      Mem mx = act(x), mdy = act(dy), mg = mem_f32(g), mb = mem_f32(b), mrm = mem_f32(rm), mrv = mem_f32(rv), my = out(),
          mdx = out(), mmean = out_f32(uc), mvar = out_f32(uc), mdg = out_f32(uc), mdb = out_f32(uc), mm = out_u8(un);
      BatchNormParams bp{N, C, HW};
      bp.update_stats = false;
      const EltwiseParams ep{n};
      const DropoutParams dp{n, 0.1, 5};
      const double tbn = time_ms(*cpu::make_batch_norm(bp, l, t), {&mx, &mg, &mb, &mrm, &mrv}, {&my, &mmean, &mvar});
      const double tbb = time_ms(*cpu::make_batch_norm_bwd(bp, l, t), {&mx, &mdy, &mg, &mmean, &mvar}, {&mdx, &mdg, &mdb});
      const double tr = time_ms(*cpu::make_relu(ep, t), {&mx}, {&my});
      const double trb = time_ms(*cpu::make_relu_bwd(ep, t), {&mx, &mdy}, {&mdx});
      const double ta = time_ms(*cpu::make_add(ep, t), {&mx, &mdy}, {&my});
      const double td = time_ms(*cpu::make_dropout(dp, t), {&mx}, {&my, &mm});
      std::printf("  %-6s %-9s %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f\n", bf ? "bf16" : "f32", lname(l), tbn, tbb, tr, trb, ta,
                  td);
    }
  }
  omp_set_num_threads(saved);
}

}  // namespace
