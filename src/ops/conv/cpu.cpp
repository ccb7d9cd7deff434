// N batch, C input channels, H/W input size, K output channels, R/S kernel
// size, G groups, OH/OW output size.
//
// Padding is symmetric (pad_l = pad_r = pad): oneDNN's output size
// (H + 2 pad - dil (R-1) - 1) / stride + 1 is then the graph's. oneDNN counts
// dilation from 0 (no dilation), the graph from 1.
//
// Layouts: the primitives are made with format_tag::any for data and weights,
// and RelayoutKernel reorders between the graph's plain buffers and oneDNN's
// blocked layouts in scratch. Measured on AVX-512 (one thread, batch 16-64):
// the blocked direct kernels (jit:avx512_core, jit_1x1, jit_dw) beat the plain
// im2col+gemm ones (gemm:jit) 1.3-3x (20x for depthwise), reorders included.
// The one exception is backward-data with few input channels (C < 16, no
// groups: 2.5-11x slower blocked), which keeps the plain layouts. The price is
// scratch: a blocked copy of each reordered operand (while the plain gemm
// path needs an im2col buffer per thread instead).
//
// The graph's activations (src/dst) may themselves be blocked (Layout
// Blocked16, nChw16c): when the primitive computes in that layout, the
// operand needs no reorder and no scratch copy.
//
// bf16 activations (act = BF16): the same primitives on bf16 src/dst (oneDNN's
// avx512_core_bf16 kernels: vdpbf16ps, f32 accumulation). The graph's f32
// weights reach the primitive through the weight reorder, which now also
// converts to bf16 (round to nearest even); the bias is passed as f32, and
// backward-weights writes f32 diff_weights / diff_bias directly. On AVX-512
// the bf16 primitives also compute in nChw16c, so Blocked16 bf16
// activations are used in place.
#include "kernels/cpu/engine.hpp"
#include "ops/conv/cpu.hpp"

#include <atomic>
#include <algorithm>
#include <chrono>
#include <ctime>
#include <omp.h>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/process.hpp"
#include "kernels/cpu/dnnl_util.hpp"

namespace memfit::kernels::cpu {
namespace {

using dnnl::algorithm;
using dnnl::prop_kind;
using tag = dnnl::memory::format_tag;

struct ConvDescs {
  dnnl::memory::desc src, wei, bias, dst;  // the graph's layouts
  dims src_dims, wei_dims, dst_dims;
  dims strides, dilates, pad;
};

using dt = dnnl::memory::data_type;

dt act_type(ElemType act) {
  if (act == ElemType::F32) return dt::f32;
  if (act == ElemType::BF16) return dt::bf16;
  throw Unsupported{};
}

dnnl::memory::desc data_desc(const dims& d, Layout l, dt t) {
  if (t == dt::f32) return l == Layout::Plain ? plain_f32(d) : dnnl::memory::desc(d, dt::f32, tag::nChw16c);
  return dnnl::memory::desc(d, t, l == Layout::Plain ? tag::nchw : tag::nChw16c);
}

// w16: the weights are stored in bf16 (bf16 master weights); their reorder
// into the primitive's layout and type converts them.
ConvDescs conv_descs(const ConvParams& p, Layout src, Layout dst, dt t, bool w16 = false) {
  ConvDescs d;
  d.src_dims = {p.N, p.C, p.H, p.W};
  // [K, C/G, R, S] is the same memory as oneDNN's grouped [G, K/G, C/G, R, S].
  d.wei_dims = p.groups > 1 ? dims{p.groups, p.K / p.groups, p.C / p.groups, p.R, p.S} : dims{p.K, p.C, p.R, p.S};
  d.dst_dims = {p.N, p.K, p.OH, p.OW};
  d.src = data_desc(d.src_dims, src, t);
  d.wei = w16 ? dnnl::memory::desc(d.wei_dims, dt::bf16, d.wei_dims.size() == 5 ? tag::goihw : tag::oihw)
              : plain_f32(d.wei_dims);
  d.bias = p.bias ? plain_f32({p.K}) : dnnl::memory::desc();
  d.dst = data_desc(d.dst_dims, dst, t);
  d.strides = {p.stride_h, p.stride_w};
  d.dilates = {p.dil_h - 1, p.dil_w - 1};
  d.pad = {p.pad_h, p.pad_w};
  return d;
}

// Descriptors the primitive is created with: plain, or "any" to let oneDNN
// pick its layouts; data and weights in the activations' type t.
struct Chosen {
  dnnl::memory::desc src, wei, dst;
};
Chosen choose(const ConvDescs& d, bool any, dt t) {
  if (!any) {
    const tag wt = d.wei_dims.size() == 5 ? tag::goihw : tag::oihw;
    if (t == dt::f32) return {plain_f32(d.src_dims), dnnl::memory::desc(d.wei_dims, dt::f32, wt), plain_f32(d.dst_dims)};
    return {dnnl::memory::desc(d.src_dims, t, tag::nchw), dnnl::memory::desc(d.wei_dims, t, wt),
            dnnl::memory::desc(d.dst_dims, t, tag::nchw)};
  }
  auto a = [t](const dims& x) { return dnnl::memory::desc(x, t, tag::any); };
  return {a(d.src_dims), a(d.wei_dims), a(d.dst_dims)};
}

dnnl::convolution_forward::primitive_desc fwd_pd(const ConvDescs& d, const Chosen& c, bool with_bias) {
  dnnl::convolution_forward::desc desc(prop_kind::forward_training, algorithm::convolution_direct, c.src, c.wei,
                                       with_bias ? d.bias : dnnl::memory::desc(), c.dst, d.strides, d.dilates,
                                       d.pad, d.pad);
  return {desc, user_scratchpad_attr(), engine()};
}

// in: x, w (, b)  out: y
class ConvFwd final : public RelayoutKernel {
 public:
  ConvFwd(const ConvParams& p, Layout x, Layout y, ElemType act, bool w16) : bf16_(act == ElemType::BF16) {
    const dt t = act_type(act);
    const ConvDescs d = conv_descs(p, x, y, t, w16);
    auto pd = fwd_pd(d, choose(d, true, t), p.bias);
    std::vector<Operand> ops{{DNNL_ARG_SRC, true, 0, d.src, pd.src_desc()},
                             {DNNL_ARG_WEIGHTS, true, 1, d.wei, pd.weights_desc()},
                             {DNNL_ARG_DST, false, 0, d.dst, pd.dst_desc()}};
    if (p.bias) ops.push_back({DNNL_ARG_BIAS, true, 2, d.bias, d.bias});
    setup(dnnl::convolution_forward(pd), pd.scratchpad_desc(), std::move(ops));
  }
  const char* name() const override { return bf16_ ? "dnnl.conv2d.bf16" : "dnnl.conv2d"; }

 private:
  bool bf16_;
};

// in: dy, w  out: dx
class ConvBwdData final : public RelayoutKernel {
 public:
  ConvBwdData(const ConvParams& p, Layout dy, Layout dx, ElemType act, bool w16) : bf16_(act == ElemType::BF16) {
    const dt t = act_type(act);
    const ConvDescs d = conv_descs(p, dx, dy, t, w16);
    const Chosen c = choose(d, p.groups > 1 || p.C >= 16, t);
    dnnl::convolution_backward_data::desc desc(algorithm::convolution_direct, c.src, c.wei, c.dst, d.strides,
                                               d.dilates, d.pad, d.pad);
    dnnl::convolution_backward_data::primitive_desc pd(desc, user_scratchpad_attr(), engine(), fwd_pd(d, c, false));
    setup(dnnl::convolution_backward_data(pd), pd.scratchpad_desc(),
          {{DNNL_ARG_DIFF_DST, true, 0, d.dst, pd.diff_dst_desc()},
           {DNNL_ARG_WEIGHTS, true, 1, d.wei, pd.weights_desc()},
           {DNNL_ARG_DIFF_SRC, false, 0, d.src, pd.diff_src_desc()}});
  }
  const char* name() const override { return bf16_ ? "dnnl.conv2d_bwd_data.bf16" : "dnnl.conv2d_bwd_data"; }

 private:
  bool bf16_;
};

// in: x, dy  out: dw (, db)
class ConvBwdWeight final : public RelayoutKernel {
 public:
  ConvBwdWeight(const ConvParams& p, Layout x, Layout dy, ElemType act) : bf16_(act == ElemType::BF16) {
    const dt t = act_type(act);
    const ConvDescs d = conv_descs(p, x, dy, t);
    const Chosen c = choose(d, true, t);
    // The weight gradient is f32 whatever the activations are.
    const dnnl::memory::desc dw(d.wei_dims, dt::f32, tag::any);
    dnnl::convolution_backward_weights::desc desc(algorithm::convolution_direct, c.src, dw, d.bias, c.dst,
                                                  d.strides, d.dilates, d.pad, d.pad);
    dnnl::convolution_backward_weights::primitive_desc pd(desc, user_scratchpad_attr(), engine(),
                                                          fwd_pd(d, c, p.bias));
    std::vector<Operand> ops{{DNNL_ARG_SRC, true, 0, d.src, pd.src_desc()},
                             {DNNL_ARG_DIFF_DST, true, 1, d.dst, pd.diff_dst_desc()},
                             {DNNL_ARG_DIFF_WEIGHTS, false, 0, d.wei, pd.diff_weights_desc()}};
    if (p.bias) ops.push_back({DNNL_ARG_DIFF_BIAS, false, 1, d.bias, pd.diff_bias_desc()});
    setup(dnnl::convolution_backward_weights(pd), pd.scratchpad_desc(), std::move(ops));
  }
  const char* name() const override { return bf16_ ? "dnnl.conv2d_bwd_weight.bf16" : "dnnl.conv2d_bwd_weight"; }

 private:
  bool bf16_;
};

}  // namespace

std::unique_ptr<Kernel> make_conv2d(const ConvParams& p, Layout x, Layout y, ElemType act, bool bf16_weights) {
  return try_make<ConvFwd, Kernel>(p, x, y, act, bf16_weights);
}
std::unique_ptr<Kernel> make_conv2d_bwd_data(const ConvParams& p, Layout dy, Layout dx, ElemType act,
                                             bool bf16_weights) {
  return try_make<ConvBwdData, Kernel>(p, dy, dx, act, bf16_weights);
}
std::unique_ptr<Kernel> make_conv2d_bwd_weight(const ConvParams& p, Layout x, Layout dy, ElemType act) {
  return try_make<ConvBwdWeight, Kernel>(p, x, dy, act);
}

namespace {

// Which clock a timing reads: the wall clock, or this thread's CPU time
// (for one thread: the time it computed, not the time other processes held
// its core, so a loaded machine does not change it).
enum class Clock { Wall, ThreadCpu };

double now(Clock c) {
  if (c == Clock::Wall)
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// The fastest run of the kernel after one warm-up, over at least `runs` runs
// and `window` seconds of wall clock (at most 200 runs): the minimum,
// because other processes on the cores only ever add time.
double time_kernel(Kernel& k, std::vector<void*> in, std::vector<void*> out, void* scratch, int runs = 7,
                   double window = 0.0, Clock clock = Clock::Wall) {
  k.bind(std::move(in), std::move(out), scratch);
  StepContext ctx;
  k.run(ctx);
  double best = 1e30;
  const double start = now(Clock::Wall);
  for (int r = 0; r < 200; ++r) {
    const double t0 = now(clock);
    k.run(ctx);
    best = std::min(best, now(clock) - t0);
    if (r + 1 >= runs && now(Clock::Wall) - start >= window) break;
  }
  return best;
}

// The probe both measurements time: a mid-sized convolution's forward and
// weight-gradient kernels on blocked activations of type act.
ConvParams probe_conv() {
  ConvParams p;
  p.N = 16;
  p.C = p.K = 64;
  p.H = p.W = p.OH = p.OW = 14;
  p.R = p.S = 3;
  p.pad_h = p.pad_w = 1;
  return p;
}

// f's result, run on one OpenMP thread (the library's parallel regions take
// omp_get_max_threads()): on a thread of its own, so the caller's count is
// never touched.
template <class F>
auto on_one_thread(F f) {
  decltype(f()) r{};
  train::run_with_threads(1, [&] { r = f(); });
  return r;
}

// Seconds for one of each probe kernel on activations of type act (0 when
// this CPU has no such kernels), each the fastest of its runs.
double time_probe_conv(ElemType act, int runs = 7, double window = 0.0, Clock clock = Clock::Wall) {
  const ConvParams p = probe_conv();
  auto fwd = make_conv2d(p, Layout::Blocked16, Layout::Blocked16, act);
  auto bww = make_conv2d_bwd_weight(p, Layout::Blocked16, Layout::Blocked16, act);
  if (!fwd || !bww) return 0.0;
  const size_t es = act == ElemType::BF16 ? 2 : 4;
  const size_t nx = size_t(p.N * p.C * p.H * p.W), nw = size_t(p.K * p.C * p.R * p.S);
  std::vector<float> w(nw, 0.01f), dw(nw);
  // Bytes 00 3f repeated: 0.5 as bf16, about 0.501 as f32 (timing only).
  std::vector<std::byte> x(nx * es), y(nx * es);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 2) ? std::byte{0x3f} : std::byte{0x00};
  std::vector<std::byte> scratch(std::max(fwd->scratch_bytes(), bww->scratch_bytes()) + 64);
  return time_kernel(*fwd, {x.data(), w.data()}, {y.data()}, scratch.data(), runs, window, clock) +
         time_kernel(*bww, {x.data(), x.data()}, {dw.data()}, scratch.data(), runs, window, clock);
}

// bf16 must win clearly: the two kinds of CPU differ by ~2x either way, so a
// 0.8 threshold on the fastest runs is not at the mercy of noise. Timed on
// one thread in its CPU time: a ratio of per-core speeds, which a loaded
// machine leaves alone.
bool measure_bf16_native() {
  return on_one_thread([] {
    double secs[2] = {1e30, 1e30};
    for (int round = 0; round < 2; ++round)
      for (int bf = 0; bf < 2; ++bf) {
        const double t = time_probe_conv(bf ? ElemType::BF16 : ElemType::F32, 7, 0.02, Clock::ThreadCpu);
        if (t <= 0) return false;
        secs[bf] = std::min(secs[bf], t);
      }
    return secs[1] < 0.8 * secs[0];
  });
}

}  // namespace

double conv_flops_per_second() {
  const ConvParams p = probe_conv();
  const double flops = 2.0 * 2.0 * double(p.N * p.K * p.OH * p.OW) * double(p.C * p.R * p.S);
  const int threads = std::max(1, omp_get_max_threads());
  // All threads: the wall clock, the fastest of runs over 60 ms (on a loaded
  // machine some fall where the team runs together). One thread: its CPU
  // time, which the load does not change.
  const double all = time_probe_conv(ElemType::F32, 7, 0.06);
  if (!(all > 0)) return 0.0;
  double rate = flops / all;
  if (threads > 1) {
    const double one = on_one_thread([] { return time_probe_conv(ElemType::F32, 7, 0.02, Clock::ThreadCpu); });
    if (one > 0) rate = std::max(rate, kConvThreadScaling * threads * flops / one);
  }
  return rate;
}

namespace {
enum class Bf16Choice { NoCompute, Measured, Forced };
struct Bf16Path {
  bool native = false;
  Bf16Choice why = Bf16Choice::NoCompute;
};
// choose_bf16_convs: 0 measured, 1 native, 2 f32.
std::atomic<int> g_bf16_choice{0};

Bf16Path bf16_path() {
  if (!onednn_bf16_compute()) return {};  // nothing to choose: there are no bf16 primitives
  const int chosen = g_bf16_choice.load();
  if (chosen != 0) return Bf16Path{chosen == 1, Bf16Choice::Forced};
  static const bool measured = measure_bf16_native();  // a fact of this machine, measured once
  return Bf16Path{measured, Bf16Choice::Measured};
}
}  // namespace

bool bf16_convs_native() { return bf16_path().native; }

bool choose_bf16_convs(const std::string& how) {
  if (how != "auto" && how != "native" && how != "f32") return false;
  g_bf16_choice = how == "auto" ? 0 : how == "native" ? 1 : 2;
  return true;
}

namespace {
// choose_winograd: -1 the rule below, else the tile (0: off).
std::atomic<int> g_winograd_choice{-1};

// Outputs computed per output kept: the tiles of m x m overhang an image
// whose side is not a multiple of m.
double overhang(const ConvParams& p, int64_t m) {
  return double((p.OH + m - 1) / m * m) * double((p.OW + m - 1) / m * m) / double(p.OH * p.OW);
}
}  // namespace

// The rule, from bench/conv_bench's times on ResNet-18's 3x3 shapes (b64, 2
// threads, this Xeon with AVX-512 and limited to AVX2; kernels alone, then
// whole steps): Winograd won wherever its tiles cover the image with little
// overhang and there are enough of them to pay for transforming the filters
// every run; at 7 x 7 (F(2,3)'s tiles compute 8 x 8) F(2,3) was 1.02-1.07x
// the direct kernel, so it stays direct; F(4,3) won 1.06-1.75x everywhere,
// overhang 1.31 included. Channels below 64 were not measured and stay
// direct. A rule and not a timing at plan time: timed, the 64-channel
// forward's margin (1.2x) let two processes of one run choose differently
// under load, and their plans differ by the Winograd scratch (33 MB in
// the memory-budget test); a plan must be the same in every process of a
// run (`memfit plan`, then `memfit train`; a resumed run; every rank).
int winograd_tile(const ConvParams& p, bool bwd_data) {
  if (!conv2d_winograd_takes(p)) return 0;
  const int chosen = g_winograd_choice.load();
  if (chosen >= 0) return chosen;
  if (p.C < 64 || p.K < 64) return 0;
  // The tiles of the convolution's output (backward-data's is dx).
  const int64_t OH = bwd_data ? p.H : p.OH, OW = bwd_data ? p.W : p.OW;
  ConvParams o = p;
  o.OH = OH;
  o.OW = OW;
  auto tiles = [&](int64_t m) { return p.N * ((OH + m - 1) / m) * ((OW + m - 1) / m); };
  if (bwd_data && overhang(o, 4) <= 1.35 && tiles(4) >= 64) return 4;
  if (overhang(o, 2) <= 1.15 && tiles(2) >= 128) return 2;
  return 0;
}

bool winograd_bwd_weight(const ConvParams& p) {
  if (!conv2d_winograd_takes(p)) return false;
  const int chosen = g_winograd_choice.load();
  if (chosen >= 0) return chosen > 0;
  if (p.C < 64 || p.K < 64) return false;
  // bench/conv_bench, ResNet-18's four shapes at batch 64, 2 threads, AMD
  // EPYC Zen 5: 1.2-1.75x oneDNN's direct kernel with AVX-512, 1.4-2.5x with
  // AVX2, 7 x 7 (overhang 1.31) included: a sum over tiles pays for its
  // overhang less than an output does.
  return overhang(p, 2) <= 1.35 && p.N * ((p.OH + 1) / 2) * ((p.OW + 1) / 2) >= 128;
}

bool choose_winograd(const std::string& how) {
  if (how != "auto" && how != "off" && how != "2" && how != "4") return false;
  g_winograd_choice = how == "auto" ? -1 : how == "off" ? 0 : how == "2" ? 2 : 4;
  return true;
}

const char* bf16_product_path() {
  const Bf16Path p = bf16_path();
  switch (p.why) {
    case Bf16Choice::NoCompute: return "f32 between conversions (no bf16 compute on this CPU)";
    case Bf16Choice::Forced: return p.native ? "native bf16 (--bf16-convs)" : "f32 between conversions (--bf16-convs)";
    case Bf16Choice::Measured: break;
  }
  return p.native ? "native bf16 (measured faster here)" : "f32 between conversions (measured faster here)";
}

}  // namespace memfit::kernels::cpu
