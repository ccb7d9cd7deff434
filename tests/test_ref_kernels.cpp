// Hand-computed cases for the scalar reference kernels. Gradient checks only
// prove a backward kernel consistent with its forward; these pin the forward
// semantics themselves (window placement, padding, ties, statistics, masks).
// Exact values are small integers or closed forms, compared exactly or to a
// few ulps of double; f32 cases use 1e-5 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "memfit/autodiff.hpp"
#include "memfit/builder.hpp"
#include "memfit/rng.hpp"
#include "memfit/runtime.hpp"
#include "ops/batchnorm/ref.hpp"
#include "ops/conv/ref.hpp"
#include "ops/dropout/ref.hpp"
#include "ops/linear/ref.hpp"
#include "ops/loss/ref.hpp"
#include "ops/pool/ref.hpp"
#include "ops/shape/ref.hpp"

using namespace memfit;
namespace k = memfit::kernels;
namespace ref = memfit::kernels::ref;

namespace {

void run(k::Kernel& kern, std::vector<void*> in, std::vector<void*> out, const k::StepContext& ctx = {}) {
  kern.bind(std::move(in), std::move(out), nullptr);
  kern.run(ctx);
}

template <class T>
std::vector<T> iota_vec(size_t n, T start = T(1)) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<T>(i);
  return v;
}

template <class T>
void expect_vec(const std::vector<T>& got, const std::vector<double>& want, double rtol = 1e-12) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(static_cast<double>(got[i]), want[i], rtol * std::max(1.0, std::abs(want[i]))) << "element " << i;
}

k::ConvParams conv_p(int64_t N, int64_t C, int64_t H, int64_t W, int64_t K, int64_t R, int64_t S, int64_t OH,
                     int64_t OW) {
  return k::ConvParams{N, C, H, W, K, R, S, OH, OW};
}

// Independent conv2d: loops over output positions and reads x through an
// explicit bounds test, written apart from the kernel's tap iterator.
std::vector<double> naive_conv(const k::ConvParams& p, const std::vector<double>& x, const std::vector<double>& w,
                               const std::vector<double>* b) {
  std::vector<double> y(static_cast<size_t>(p.N * p.K * p.OH * p.OW));
  const int64_t Cg = p.C / p.groups, Kg = p.K / p.groups;
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t kk = 0; kk < p.K; ++kk)
      for (int64_t oh = 0; oh < p.OH; ++oh)
        for (int64_t ow = 0; ow < p.OW; ++ow) {
          double acc = b ? (*b)[static_cast<size_t>(kk)] : 0.0;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t r = 0; r < p.R; ++r)
              for (int64_t s = 0; s < p.S; ++s) {
                const int64_t ih = oh * p.stride_h + r * p.dil_h - p.pad_h;
                const int64_t iw = ow * p.stride_w + s * p.dil_w - p.pad_w;
                if (ih < 0 || iw < 0 || ih >= p.H || iw >= p.W) continue;
                const int64_t ci = kk / Kg * Cg + c;
                acc += x[static_cast<size_t>(((n * p.C + ci) * p.H + ih) * p.W + iw)] *
                       w[static_cast<size_t>(((kk * Cg + c) * p.R + r) * p.S + s)];
              }
          y[static_cast<size_t>(((n * p.K + kk) * p.OH + oh) * p.OW + ow)] = acc;
        }
  return y;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

std::vector<double> pseudo_random(size_t n, uint64_t stream) {
  std::vector<double> v(n);
  const uint64_t key = rng::stream_key(1, stream, 0);
  for (size_t i = 0; i < n; ++i) v[i] = rng::uniform_sym(key, i, 1.0f);
  return v;
}

}  // namespace

// ---------------------------------------------------------------- conv ----

TEST(RefConv, Known3x3Input2x2Kernel) {
  // x = 1..9 as 3x3, w = [[1, 2], [3, 4]], b = 0.5:
  // y[0,0] = 1*1 + 2*2 + 3*4 + 4*5 + 0.5 = 37.5, and so on.
  auto p = conv_p(1, 1, 3, 3, 1, 2, 2, 2, 2);
  p.bias = true;
  auto x = iota_vec<double>(9);
  std::vector<double> w{1, 2, 3, 4}, b{0.5}, y(4);
  ref::Conv2d<double> kern(p);
  run(kern, {x.data(), w.data(), b.data()}, {y.data()});
  expect_vec(y, {37.5, 47.5, 67.5, 77.5});

  // Same in f32.
  auto xf = iota_vec<float>(9);
  std::vector<float> wf{1, 2, 3, 4}, bf{0.5f}, yf(4);
  ref::Conv2d<float> kf(p);
  run(kf, {xf.data(), wf.data(), bf.data()}, {yf.data()});
  expect_vec(yf, {37.5, 47.5, 67.5, 77.5}, 0);
}

TEST(RefConv, PaddedStride2) {
  // 3x3 ones kernel, pad 1, stride 2 over x = 1..9: windows centred on the
  // corners sum their 2x2 in-bounds part: 1+2+4+5, 2+3+5+6, 4+5+7+8, 5+6+8+9.
  auto p = conv_p(1, 1, 3, 3, 1, 3, 3, 2, 2);
  p.stride_h = p.stride_w = 2;
  p.pad_h = p.pad_w = 1;
  auto x = iota_vec<double>(9);
  std::vector<double> w(9, 1.0), y(4);
  ref::Conv2d<double> kern(p);
  run(kern, {x.data(), w.data()}, {y.data()});
  expect_vec(y, {12, 16, 24, 28});
}

TEST(RefConv, BackwardKnown) {
  // dy = ones over the 2x2 output of a 2x2 kernel on 3x3: dx counts how often
  // each input meets each weight; dw sums the 2x2 input patches.
  auto p = conv_p(1, 1, 3, 3, 1, 2, 2, 2, 2);
  p.bias = true;
  auto x = iota_vec<double>(9);
  std::vector<double> w{1, 2, 3, 4}, dy(4, 1.0), dx(9), dw(4), db(1);
  ref::Conv2dBwdData<double> kd(p);
  run(kd, {dy.data(), w.data()}, {dx.data()});
  expect_vec(dx, {1, 3, 2, 4, 10, 6, 3, 7, 4});
  ref::Conv2dBwdWeight<double> kw(p);
  run(kw, {x.data(), dy.data()}, {dw.data(), db.data()});
  expect_vec(dw, {12, 16, 24, 28});
  expect_vec(db, {4});
}

TEST(RefConv, DepthwiseScalesEachChannel) {
  // groups = C = 2, 1x1 weights 2 and -3: each channel scaled on its own.
  auto p = conv_p(1, 2, 2, 2, 2, 1, 1, 2, 2);
  p.groups = 2;
  auto x = iota_vec<double>(8);
  std::vector<double> w{2, -3}, y(8);
  ref::Conv2d<double> kern(p);
  run(kern, {x.data(), w.data()}, {y.data()});
  expect_vec(y, {2, 4, 6, 8, -15, -18, -21, -24});
}

TEST(RefConv, AsymmetricGroupedMatchesNaiveAndAdjoint) {
  // Rectangular kernel, different stride/pad/dilation per axis, groups 2.
  // Forward against an independent loop; backward by the adjoint identities
  // <conv(x), dy> = <x, bwd_data(dy)> = <w, bwd_weight(x, dy)>.
  k::ConvParams p = conv_p(2, 4, 7, 9, 6, 2, 3, 0, 0);
  p.stride_h = 2, p.stride_w = 1, p.pad_h = 1, p.pad_w = 2, p.dil_h = 1, p.dil_w = 2, p.groups = 2, p.bias = true;
  p.OH = (p.H + 2 * p.pad_h - p.dil_h * (p.R - 1) - 1) / p.stride_h + 1;
  p.OW = (p.W + 2 * p.pad_w - p.dil_w * (p.S - 1) - 1) / p.stride_w + 1;
  auto x = pseudo_random(static_cast<size_t>(p.N * p.C * p.H * p.W), 1);
  auto w = pseudo_random(static_cast<size_t>(p.K * 2 * p.R * p.S), 2);
  auto b = pseudo_random(static_cast<size_t>(p.K), 3);
  const size_t ny = static_cast<size_t>(p.N * p.K * p.OH * p.OW);
  std::vector<double> y(ny);
  ref::Conv2d<double> kf(p);
  run(kf, {x.data(), w.data(), b.data()}, {y.data()});
  expect_vec(y, naive_conv(p, x, w, &b));

  auto dy = pseudo_random(ny, 4);
  std::vector<double> dx(x.size()), dw(w.size()), db(b.size());
  ref::Conv2dBwdData<double> kd(p);
  run(kd, {dy.data(), w.data()}, {dx.data()});
  ref::Conv2dBwdWeight<double> kw(p);
  run(kw, {x.data(), dy.data()}, {dw.data(), db.data()});
  const std::vector<double> y0 = naive_conv(p, x, w, nullptr);
  const double lhs = dot(y0, dy);
  EXPECT_NEAR(dot(x, dx), lhs, 1e-10 * std::abs(lhs) + 1e-12);
  EXPECT_NEAR(dot(w, dw), lhs, 1e-10 * std::abs(lhs) + 1e-12);
  double sum_dy = 0;
  for (double v : dy) sum_dy += v;
  double sum_db = 0;
  for (double v : db) sum_db += v;
  EXPECT_NEAR(sum_db, sum_dy, 1e-12);
}

// ---------------------------------------------------------------- pool ----

namespace {
// Every field in one initializer: GCC 12.2's SLP vectorizer, at -O3
// -march=native on a Rocket Lake-class Xeon, stored the stride into pad_h
// when this was written as the aggregate's first eight fields followed by
// `p.stride_h = p.stride_w = stride; p.pad_h = p.pad_w = pad;` (the kernel's
// copy read pad 2; -fno-tree-slp-vectorize or -march=x86-64-v3 did not).
k::PoolParams pool_p(int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t R, int64_t stride, int64_t pad) {
  return k::PoolParams{1, 1, H, W, OH, OW, R, R, stride, stride, pad, pad};
}
}  // namespace

TEST(RefPool, MaxIndices) {
  std::vector<double> x{1, 5, 2, 0,  //
                        3, 4, 8, 6,  //
                        7, 0, 1, 9,  //
                        2, 6, 3, 5};
  std::vector<double> y(4);
  std::vector<int32_t> idx(4);
  ref::MaxPool2d<double> kern(pool_p(4, 4, 2, 2, 2, 2, 0));
  run(kern, {x.data()}, {y.data(), idx.data()});
  expect_vec(y, {5, 8, 7, 9});
  EXPECT_EQ(idx, (std::vector<int32_t>{1, 6, 8, 11}));
}

TEST(RefPool, MaxTiesTakeFirstInScanOrder) {
  std::vector<float> x(9, 2.0f), y(4);
  std::vector<int32_t> idx(4);
  ref::MaxPool2d<float> kern(pool_p(3, 3, 2, 2, 2, 1, 0));
  run(kern, {x.data()}, {y.data(), idx.data()});
  EXPECT_EQ(idx, (std::vector<int32_t>{0, 1, 3, 4}));
}

TEST(RefPool, MaxPaddingNeverWins) {
  // All inputs negative: a padded zero would win if padding were read.
  std::vector<double> x{-1, -2, -3, -4, -5, -6, -7, -8, -9}, y(4);
  std::vector<int32_t> idx(4);
  ref::MaxPool2d<double> kern(pool_p(3, 3, 2, 2, 3, 2, 1));
  run(kern, {x.data()}, {y.data(), idx.data()});
  expect_vec(y, {-1, -2, -4, -5});
  EXPECT_EQ(idx, (std::vector<int32_t>{0, 1, 3, 4}));
}

TEST(RefPool, MaxBackwardAccumulatesOverlaps) {
  // The centre wins all four overlapping 2x2 windows: its gradient is the sum.
  std::vector<double> dy{1, 2, 3, 4}, dx(9, 123.0);
  std::vector<int32_t> idx{4, 4, 4, 4};
  ref::MaxPool2dBwd<double> kern(pool_p(3, 3, 2, 2, 2, 1, 0));
  run(kern, {dy.data(), idx.data()}, {dx.data()});
  expect_vec(dx, {0, 0, 0, 0, 10, 0, 0, 0, 0});
}

TEST(RefPool, MaxNaNPropagates) {
  std::vector<double> x{1, std::numeric_limits<double>::quiet_NaN(), 3, 4}, y(1);
  std::vector<int32_t> idx(1);
  ref::MaxPool2d<double> kern(pool_p(2, 2, 1, 1, 2, 2, 0));
  run(kern, {x.data()}, {y.data(), idx.data()});
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(idx[0], 1);
}

TEST(RefPool, AvgCountIncludePadBothWays) {
  // 3x3 window, stride 1, pad 1 over x = 1..9.
  auto x = iota_vec<double>(9);
  std::vector<double> y(9), dx(9), dy(9, 1.0);
  k::PoolParams p = pool_p(3, 3, 3, 3, 3, 1, 1);
  p.count_include_pad = true;
  ref::AvgPool2d<double> inc(p);
  run(inc, {x.data()}, {y.data()});
  expect_vec(y, {12 / 9., 21 / 9., 16 / 9., 27 / 9., 45 / 9., 33 / 9., 24 / 9., 39 / 9., 28 / 9.});
  ref::AvgPool2dBwd<double> inc_b(p);
  run(inc_b, {dy.data()}, {dx.data()});
  expect_vec(dx, {4 / 9., 6 / 9., 4 / 9., 6 / 9., 1, 6 / 9., 4 / 9., 6 / 9., 4 / 9.});

  p.count_include_pad = false;
  ref::AvgPool2d<double> exc(p);
  run(exc, {x.data()}, {y.data()});
  expect_vec(y, {3, 3.5, 4, 4.5, 5, 5.5, 6, 6.5, 7});
  ref::AvgPool2dBwd<double> exc_b(p);
  run(exc_b, {dy.data()}, {dx.data()});
  // Windows centred on a corner hold 4 valid elements, on an edge 6, the
  // centre 9. Input (0,0) lies in 1 corner, 2 edge and the centre window;
  // (0,1) in 2 corner, 3 edge and the centre; (1,1) in all nine.
  const double corner = 1 / 4. + 2 / 6. + 1 / 9., edge = 2 / 4. + 3 / 6. + 1 / 9., centre = 4 / 4. + 4 / 6. + 1 / 9.;
  expect_vec(dx, {corner, edge, corner, edge, centre, edge, corner, edge, corner});
}

TEST(RefPool, GlobalAverage) {
  auto x = iota_vec<double>(12);  // [1, 2, 6]: channel means 3.5 and 9.5
  std::vector<double> y(2), dy{6, 12}, dx(12);
  k::GlobalPoolParams p{1, 2, 6};
  ref::GlobalAvgPool<double> f(p);
  run(f, {x.data()}, {y.data()});
  expect_vec(y, {3.5, 9.5});
  ref::GlobalAvgPoolBwd<double> bwd(p);
  run(bwd, {dy.data()}, {dx.data()});
  expect_vec(dx, {1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2});
}

// ----------------------------------------------------------- batch norm ----

TEST(RefBatchNorm, RunningStatsAfterOneAndTwoSteps) {
  // Through builder, lowering and executor: x = [1, 2, 3, 4] as [4, 1].
  // mean 2.5, biased var 1.25 (normalises), unbiased var 5/3 (running).
  Graph g;
  Builder b(g, true);
  ValueId x = g.input("x", {4, 1});
  ValueId y = batch_norm(b, x, {.eps = 0.0, .momentum = 0.1});
  g.value(y).is_output = true;
  const Node& bn = g.node(g.value(y).producer);
  const ValueId rm = bn.inputs[3], rv = bn.inputs[4], mean = bn.outputs[1], var = bn.outputs[2];
  g.value(mean).is_output = g.value(var).is_output = true;
  for (Backend be : {Backend::Reference, Backend::Reference64}) {
    SCOPED_TRACE(backend_name(be));
    ExecConfig cfg;
    cfg.backend = be;
    Executor ex(g, cfg);
    ex.init_params(0);
    const float xv[4] = {1, 2, 3, 4};
    ex.write_f32(x, xv);
    ex.run({});
    float out[4], m[1], v[1], rmv[1], rvv[1];
    ex.read_f32(y, out);
    ex.read_f32(mean, m);
    ex.read_f32(var, v);
    ex.read_f32(rm, rmv);
    ex.read_f32(rv, rvv);
    const double sd = std::sqrt(1.25);
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], (xv[i] - 2.5) / sd, 1e-6);
    EXPECT_FLOAT_EQ(m[0], 2.5f);
    EXPECT_FLOAT_EQ(v[0], 1.25f);
    EXPECT_FLOAT_EQ(rmv[0], 0.25f);                    // 0.9 * 0 + 0.1 * 2.5
    EXPECT_FLOAT_EQ(rvv[0], float(0.9 + 0.1 * 5 / 3.));  // 0.9 * 1 + 0.1 * 5/3
    ex.run({});
    ex.read_f32(rm, rmv);
    ex.read_f32(rv, rvv);
    EXPECT_FLOAT_EQ(rmv[0], float(0.9 * 0.25 + 0.25));
    EXPECT_FLOAT_EQ(rvv[0], float(0.9 * (0.9 + 0.5 / 3) + 0.5 / 3));
  }
}

TEST(RefBatchNorm, EvalUsesRunningStats) {
  // [2, 2, 1, 1]; channel 0: rm 2, rv 4; channel 1: rm -1, rv 0.25; eps 0.
  k::BatchNormParams p{2, 2, 1};
  p.eps = 0;
  p.training = false;
  std::vector<double> x{4, 0, 6, 1}, gamma{1, 2}, beta{0.5, 0}, rm{2, -1}, rv{4, 0.25}, y(4), mean(2), var(2);
  ref::BatchNorm<double> kern(p);
  run(kern, {x.data(), gamma.data(), beta.data(), rm.data(), rv.data()}, {y.data(), mean.data(), var.data()});
  expect_vec(y, {1.5, 4, 2.5, 8});
  expect_vec(mean, {2, -1});
  expect_vec(var, {4, 0.25});
  expect_vec(rm, {2, -1});  // untouched
  expect_vec(rv, {4, 0.25});
  // Backward in eval: dx = gamma / sd * dy; dgamma = sum dy xhat; dbeta = sum dy.
  std::vector<double> dy{1, 1, 2, -1}, dx(4), dg(2), dbt(2);
  ref::BatchNormBwd<double> bwd(p);
  run(bwd, {x.data(), dy.data(), gamma.data(), mean.data(), var.data()}, {dx.data(), dg.data(), dbt.data()});
  expect_vec(dx, {0.5, 4, 1, -4});
  expect_vec(dg, {1 * 1 + 2 * 2, 1 * 2 + -1 * 4});
  expect_vec(dbt, {3, 0});
}

TEST(RefBatchNorm, F32StatisticsAccumulateInDouble) {
  // 2^20 values 4096 + {0, 1, 2, 3}: an f32 running sum would stall at 2^24
  // granularity; double sums give mean 4097.5 and var 1.25 to f32 precision.
  const int64_t n = 1 << 20;
  k::BatchNormParams p{n, 1, 1};
  std::vector<float> x(static_cast<size_t>(n)), y(x.size()), gamma{1}, beta{0}, rm{0}, rv{1}, mean(1), var(1);
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = 4096.0f + static_cast<float>(i % 4);
  ref::BatchNorm<float> kern(p);
  run(kern, {x.data(), gamma.data(), beta.data(), rm.data(), rv.data()}, {y.data(), mean.data(), var.data()});
  EXPECT_FLOAT_EQ(mean[0], 4097.5f);
  EXPECT_NEAR(var[0], 1.25f, 1e-6);
  EXPECT_NEAR(y[0], -1.5 / std::sqrt(1.25 + 1e-5), 1e-5);
}

TEST(RefBatchNorm, SingleValuePerChannelRejectedBeforeRunning) {
  Graph g;
  Builder b(g, true);
  ValueId x = g.input("x", {1, 3});
  ValueId y = batch_norm(b, x);
  g.value(y).is_output = true;
  ExecConfig cfg;
  cfg.backend = Backend::Reference;
  EXPECT_THROW(Executor(g, cfg), std::invalid_argument);
}

// -------------------------------------------------------------- dropout ----

TEST(RefDropout, KeepFractionScaleAndReproducibility) {
  const int64_t n = 100000;
  const double p = 0.3;
  const double kScale = 1.0 / (1.0 - p);
  k::DropoutParams dp{n, p, rng::name_hash("block.dropout")};
  std::vector<double> x(static_cast<size_t>(n), 2.0), y(x.size());
  std::vector<uint8_t> m1(x.size()), m2(x.size()), m3(x.size()), m4(x.size());
  k::StepContext ctx;
  ctx.seed = 42;
  ctx.step = 7;
  ref::Dropout<double> kern(dp);
  run(kern, {x.data()}, {y.data(), m1.data()}, ctx);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    const size_t s = static_cast<size_t>(i);
    kept += m1[s];
    ASSERT_EQ(y[s], m1[s] ? 2.0 * kScale : 0.0) << i;
  }
  EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(n), 1.0 - p, 0.01);
  // Element i is kept iff uniform01(stream_key(seed, stream, step), i) >= p.
  const uint64_t key = rng::stream_key(42, dp.stream, 7);
  for (int64_t i : {0, 1, 2, 99999}) EXPECT_EQ(m1[static_cast<size_t>(i)], rng::uniform01(key, i) >= 0.3f ? 1 : 0);

  run(kern, {x.data()}, {y.data(), m2.data()}, ctx);
  EXPECT_EQ(m1, m2) << "same (seed, stream, step) must give the same mask";
  ctx.step = 8;
  run(kern, {x.data()}, {y.data(), m3.data()}, ctx);
  ctx.step = 7;
  ref::Dropout<double> other(k::DropoutParams{n, p, rng::name_hash("other.dropout")});
  run(other, {x.data()}, {y.data(), m4.data()}, ctx);
  int64_t diff_step = 0, diff_stream = 0;
  for (size_t i = 0; i < m1.size(); ++i) {
    diff_step += m1[i] != m3[i];
    diff_stream += m1[i] != m4[i];
  }
  // Independent masks differ in 2 p (1-p) = 42% of the elements.
  EXPECT_NEAR(static_cast<double>(diff_step) / static_cast<double>(n), 0.42, 0.02);
  EXPECT_NEAR(static_cast<double>(diff_stream) / static_cast<double>(n), 0.42, 0.02);

  // Backward: the same mask and scale.
  std::vector<double> dx(x.size());
  ref::DropoutBwd<double> bwd(dp);
  run(bwd, {x.data(), m1.data()}, {dx.data()});
  for (size_t i = 0; i < dx.size(); ++i) ASSERT_EQ(dx[i], m1[i] ? 2.0 * kScale : 0.0);
}

// A row's mask is keyed by its place in the global batch (StepContext::row0):
// a [4, 50] batch's mask is the masks of its halves [2, 50] run with row0 0
// and 2, however the batch is split between micro-batches and ranks.
TEST(RefDropout, RowsDrawTheirPlaceInTheGlobalBatch) {
  const int64_t per = 50;
  k::DropoutParams whole{4 * per, 0.4, rng::name_hash("fc.dropout"), 4};
  k::DropoutParams half{2 * per, 0.4, rng::name_hash("fc.dropout"), 2};
  std::vector<float> x(4 * per, 1.0f), y(x.size()), hy(2 * per);
  std::vector<uint8_t> m(x.size()), hm(2 * per);
  k::StepContext ctx;
  ctx.seed = 3;
  ctx.step = 5;
  ref::Dropout<float> kw(whole), kh(half);
  run(kw, {x.data()}, {y.data(), m.data()}, ctx);
  for (int64_t row0 : {0, 2}) {
    ctx.row0 = row0;
    run(kh, {x.data()}, {hy.data(), hm.data()}, ctx);
    EXPECT_EQ(std::vector<uint8_t>(m.begin() + row0 * per, m.begin() + (row0 + 2) * per), hm) << "row0 " << row0;
  }
}

TEST(RefDropout, LoweringUsesLayerHashAsStream) {
  // The stream attribute is the layer-name hash stored as int64 (negative for
  // half the names); the lowering must hand the same 64 bits to the kernel.
  Graph g;
  Builder b(g, true);
  ValueId x = g.input("x", {1000});
  ValueId y = dropout(b, x, 0.25, "head.drop");
  const ValueId mask = g.node(g.value(y).producer).outputs[1];
  g.value(y).is_output = g.value(mask).is_output = true;
  ExecConfig cfg;
  cfg.backend = Backend::Reference;
  Executor ex(g, cfg);
  std::vector<float> xv(1000, 1.0f), yv(1000);
  ex.write_f32(x, xv.data());
  k::StepContext ctx;
  ctx.seed = 5;
  ctx.step = 3;
  ex.run(ctx);
  ex.read_f32(y, yv.data());
  const uint64_t key = rng::stream_key(5, rng::name_hash("head.drop"), 3);
  const uint8_t* mv = ex.ptr<uint8_t>(mask);
  for (uint64_t i = 0; i < 1000; ++i) {
    const bool keep = rng::uniform01(key, i) >= 0.25f;
    ASSERT_EQ(mv[i], keep ? 1 : 0) << i;
    ASSERT_EQ(yv[i], keep ? 1.0f / 0.75f : 0.0f) << i;
  }
}

// -------------------------------------------------------- softmax xent ----

TEST(RefXent, KnownLoss) {
  // logits [0, ln 2] -> p = [1/3, 2/3]. Row 0 label 1: -ln(2/3) = ln 1.5;
  // row 1 (same logits) label 0: ln 3. Mean: (ln 1.5 + ln 3) / 2.
  const double l2 = std::log(2.0);
  std::vector<double> z{0, l2, 0, l2}, loss(1), probs(4);
  std::vector<int32_t> y{1, 0};
  ref::SoftmaxXent<double> kern(k::XentParams{2, 2, 0.0});
  run(kern, {z.data(), y.data()}, {loss.data(), probs.data()});
  EXPECT_NEAR(loss[0], (std::log(1.5) + std::log(3.0)) / 2, 1e-15);
  expect_vec(probs, {1 / 3., 2 / 3., 1 / 3., 2 / 3.});

  // Backward with dloss = 2: (p - onehot) * 2 / 2.
  std::vector<double> dloss{2}, dz(4);
  ref::SoftmaxXentBwd<double> bwd(k::XentParams{2, 2, 0.0});
  run(bwd, {probs.data(), y.data(), dloss.data()}, {dz.data()});
  expect_vec(dz, {1 / 3., -1 / 3., -2 / 3., 2 / 3.});
}

TEST(RefXent, LabelSmoothingAndInPlaceBackward) {
  // s = 0.1, C = 2: q = [0.05, 0.95] for label 1.
  const double l2 = std::log(2.0);
  std::vector<float> z{0, static_cast<float>(l2)}, loss(1), probs(2);
  std::vector<int32_t> y{1};
  ref::SoftmaxXent<float> kern(k::XentParams{1, 2, 0.1});
  run(kern, {z.data(), y.data()}, {loss.data(), probs.data()});
  EXPECT_NEAR(loss[0], -(0.05 * std::log(1 / 3.) + 0.95 * std::log(2 / 3.)), 1e-6);
  // dlogits written over probs (the planner may alias them).
  std::vector<float> dloss{1};
  ref::SoftmaxXentBwd<float> bwd(k::XentParams{1, 2, 0.1});
  run(bwd, {probs.data(), y.data(), dloss.data()}, {probs.data()});
  EXPECT_NEAR(probs[0], 1 / 3. - 0.05, 1e-6);
  EXPECT_NEAR(probs[1], 2 / 3. - 0.95, 1e-6);
}

TEST(RefXent, HugeLogitsStayFinite) {
  std::vector<float> z{1000.0f, 0.0f, -1000.0f}, loss(1), probs(3);
  std::vector<int32_t> y{1};
  ref::SoftmaxXent<float> kern(k::XentParams{1, 3, 0.0});
  run(kern, {z.data(), y.data()}, {loss.data(), probs.data()});
  EXPECT_FLOAT_EQ(loss[0], 1000.0f);
  expect_vec(probs, {1, 0, 0});
}

TEST(RefXent, OutOfRangeLabelGivesNaNNotACrash) {
  std::vector<double> z{0, 1, 2, 3, 4, 5}, loss(1), probs(6), dz(6), dloss{1};
  std::vector<int32_t> y{2, -1};  // C = 3: row 1 is invalid
  ref::SoftmaxXent<double> kern(k::XentParams{2, 3, 0.0});
  run(kern, {z.data(), y.data()}, {loss.data(), probs.data()});
  EXPECT_TRUE(std::isnan(loss[0]));
  ref::SoftmaxXentBwd<double> bwd(k::XentParams{2, 3, 0.0});
  y[1] = 3;
  run(bwd, {probs.data(), y.data(), dloss.data()}, {dz.data()});
  for (int c = 0; c < 3; ++c) EXPECT_TRUE(std::isfinite(dz[static_cast<size_t>(c)]));
  for (int c = 3; c < 6; ++c) EXPECT_TRUE(std::isnan(dz[static_cast<size_t>(c)]));
}

// --------------------------------------------------------------- matmul ----

TEST(RefMatmul, TransposesAndBroadcast) {
  std::vector<double> a{1, 2, 3, 4}, b{5, 6, 7, 8}, c(4);
  auto mm = [&](bool ta, bool tb) {
    k::MatmulParams p{1, 2, 2, 2, ta, tb, 1, 1};
    ref::Matmul<double> kern(p);
    run(kern, {a.data(), b.data()}, {c.data()});
    return c;
  };
  expect_vec(mm(false, false), {19, 22, 43, 50});
  expect_vec(mm(false, true), {17, 23, 39, 53});
  expect_vec(mm(true, false), {26, 30, 38, 44});
  expect_vec(mm(true, true), {23, 31, 34, 46});

  // Batch of 2 with b shared: the second batch of a is 2a.
  std::vector<double> a2{1, 2, 3, 4, 2, 4, 6, 8}, c2(8);
  k::MatmulParams p{2, 2, 2, 2, false, false, 2, 1};
  ref::Matmul<double> kern(p);
  run(kern, {a2.data(), b.data()}, {c2.data()});
  expect_vec(c2, {19, 22, 43, 50, 38, 44, 86, 100});
}

// -------------------------------------------------------- concat/slice ----

TEST(RefShape, ConcatAndSliceMiddleAxis) {
  // [2, 1, 2] and [2, 2, 2] joined on axis 1 -> [2, 3, 2].
  std::vector<double> a{1, 2, 3, 4}, b{10, 11, 12, 13, 14, 15, 16, 17}, y(12);
  ref::Concat<double> cat(k::ConcatParams{2, 2, {1, 2}});
  run(cat, {a.data(), b.data()}, {y.data()});
  expect_vec(y, {1, 2, 10, 11, 12, 13, 3, 4, 14, 15, 16, 17});
  std::vector<double> s(8);
  ref::Slice<double> sl(k::SliceParams{2, 2, 3, 1, 2});
  run(sl, {y.data()}, {s.data()});
  expect_vec(s, b);
}

TEST(RefShape, IntegerConcatKeepsItsTypeInDoubleBackend) {
  Graph g;
  Builder b(g, true);
  ValueId l0 = g.input("l0", {2}, DType::i32), l1 = g.input("l1", {3}, DType::i32);
  ValueId y = concat(b, {l0, l1}, 0);
  g.value(y).is_output = true;
  ExecConfig cfg;
  cfg.backend = Backend::Reference64;
  Executor ex(g, cfg);
  ASSERT_EQ(ex.elem_size(y), 4u);
  const int32_t v0[2] = {7, -1}, v1[3] = {3, 4, 5};
  std::memcpy(ex.data(l0), v0, sizeof v0);
  std::memcpy(ex.data(l1), v1, sizeof v1);
  ex.run({});
  const int32_t* out = ex.ptr<int32_t>(y);
  EXPECT_EQ(std::vector<int32_t>(out, out + 5), (std::vector<int32_t>{7, -1, 3, 4, 5}));
}

// ------------------------------------------------------------ whole graph ----

namespace {

// conv -> bn -> relu -> max pool -> dropout -> linear -> softmax_xent, with
// backward; returns the loss and every parameter gradient as f32.
std::vector<float> run_small_net(Backend be, bool in_place) {
  Graph g;
  Builder b(g, true);
  ValueId x = g.input("x", {2, 2, 6, 6});
  ValueId lab = g.input("labels", {2}, DType::i32);
  ValueId h = conv2d(b, x, 3, 3, {.pad = 1, .name = "conv"});
  h = batch_norm(b, h, {.name = "bn"});
  h = max_pool2d(b, relu(b, h), 2);
  h = dropout(b, flatten(b, h), 0.3, "drop");
  h = linear(b, h, 4, {.name = "fc"});
  ValueId loss = softmax_xent(b, h, lab, 0.1);
  BackwardResult bw = build_backward(g, loss);
  ExecConfig cfg;
  cfg.backend = be;
  cfg.plan.in_place = in_place;
  Executor ex(g, cfg);
  ex.init_params(3);
  ex.poison();
  std::vector<float> xv(static_cast<size_t>(numel(g.value(x).shape)));
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i)));
  ex.write_f32(x, xv.data());
  const int32_t lv[2] = {1, 3};
  std::memcpy(ex.data(lab), lv, sizeof lv);
  k::StepContext ctx;
  ctx.seed = 9;
  ex.run(ctx);
  std::vector<float> r(1);
  ex.read_f32(loss, r.data());
  for (auto& [param, grad] : bw.grads) {
    std::vector<float> gv(static_cast<size_t>(numel(g.value(grad).shape)));
    ex.read_f32(grad, gv.data());
    r.insert(r.end(), gv.begin(), gv.end());
  }
  return r;
}

}  // namespace

TEST(RefGraph, InPlaceEqualsOutOfPlace) {
  // Dropout runs in place over its input, softmax_xent_bwd over the probs,
  // relu_bwd over dy: the results must not change by a single bit.
  for (Backend be : {Backend::Reference, Backend::Reference64}) {
    SCOPED_TRACE(backend_name(be));
    auto a = run_small_net(be, true), c = run_small_net(be, false);
    ASSERT_EQ(a.size(), c.size());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(std::memcmp(&a[i], &c[i], 4), 0) << i;
    for (float v : a) ASSERT_TRUE(std::isfinite(v));
  }
}

TEST(RefGraph, F32ReferenceTracksF64) {
  auto f = run_small_net(Backend::Reference, true), d = run_small_net(Backend::Reference64, true);
  ASSERT_EQ(f.size(), d.size());
  // f32 accumulation over at most a few hundred terms of O(1) values.
  for (size_t i = 0; i < f.size(); ++i) EXPECT_NEAR(f[i], d[i], 1e-5 + 1e-4 * std::abs(d[i])) << i;
}
