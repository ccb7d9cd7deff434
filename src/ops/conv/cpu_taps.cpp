// The weight gradient of a stride-1 convolution with few input taps (C x R
// x S at most kConvMaxTaps), f32, x and dy plain NCHW, K a multiple of 4.
//
// oneDNN 2.6's AVX2 backward-weights kernels are made for many input
// channels: with one (the ConvNet's first layer, 1 -> 32 5x5 on 28 x 28,
// batch 256) its kernel ran at 16 GFLOP/s, a tenth of the machine's peak,
// and took 12% of the ConvNet's training step. Here dw[k][tap] = sum over
// images and output positions p of dy[k][p] x[p + tap] runs with the lanes
// over consecutive positions: an image is copied into a zero-padded buffer
// of row length Wp, and its dy into rows of the same length (zeros past the
// last column), so that a position's input under each tap is at a fixed
// distance and one flat loop covers the image. For kChannels output
// channels and up to kTaps taps at a time, each chunk of positions loads its
// shifted input vectors once and multiplies them by the channels' dy vectors
// into kChannels x taps sums held in registers; an image's sums are then
// added across their lanes.
//
// Measured (Xeon, 2 threads, the fastest of 8 runs, f32 with bias): with
// oneDNN limited to AVX2 and this file built for x86-64-v3, 1 -> 32 5x5 at
// batch 256 4.5 ms against oneDNN's 20.1; 1 -> 64 3x3 at 64 1.0 against
// 4.5; 3 -> 64 3x3 on 32 x 32 at 64 2.5 against 3.2. With AVX-512 both
// took the same time (3.3 against 3.2 ms, 1.1 against 1.1 ms), so the
// lowering keeps oneDNN's there (few_taps_preferred).
//
#include <omp.h>

#include <algorithm>
#include <array>
#include <string>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/cpu/engine.hpp"
#include "kernels/cpu/parallel.hpp"
#include "ops/conv/cpu.hpp"

namespace memfit::kernels::cpu {
namespace {

#if defined(__AVX512F__)
constexpr int kLanes = 16, kTaps = 6;  // 24 sums, 6 inputs and a dy vector: 31 of 32 registers
#else
constexpr int kLanes = 8, kTaps = 3;  // 12 sums, 3 inputs and a dy vector: 16 of 16 registers
#endif
constexpr int kChannels = 4;
typedef float FV __attribute__((vector_size(4 * kLanes)));
typedef float FVu __attribute__((vector_size(4 * kLanes), aligned(4)));

// out[j * G + t] (j < kChannels) = sum over the P positions (a multiple of
// kLanes) of dy[j * ch + p] x[p + off[t]].
template <int G>
void pass(const float* x, const float* dy, int64_t ch, int64_t P, const int64_t* off, float* out) {
  // Every loop over acc unrolled whole, so that the sums live in registers
  // (rolled, GCC kept acc in memory and stored each sum after every
  // multiply-add).
  FV acc[kChannels][G];
#pragma GCC unroll 4
  for (int j = 0; j < kChannels; ++j)
#pragma GCC unroll 8
    for (int t = 0; t < G; ++t) acc[j][t] = FV{};
  const float* xs[G];
  for (int t = 0; t < G; ++t) xs[t] = x + off[t];
  for (int64_t p = 0; p < P; p += kLanes) {
    FV xv[G];
#pragma GCC unroll 8
    for (int t = 0; t < G; ++t) xv[t] = *reinterpret_cast<const FVu*>(xs[t] + p);
#pragma GCC unroll 4
    for (int j = 0; j < kChannels; ++j) {
      const FV dv = *reinterpret_cast<const FVu*>(dy + j * ch + p);
#pragma GCC unroll 8
      for (int t = 0; t < G; ++t) acc[j][t] += xv[t] * dv;
    }
  }
#pragma GCC unroll 4
  for (int j = 0; j < kChannels; ++j)
#pragma GCC unroll 8
    for (int t = 0; t < G; ++t) {
      float sum = 0;
      for (int l = 0; l < kLanes; ++l) sum += acc[j][t][l];
      out[j * G + t] = sum;
    }
}

using PassFn = void (*)(const float*, const float*, int64_t, int64_t, const int64_t*, float*);

template <int... G>
constexpr std::array<PassFn, sizeof...(G)> pass_table(std::integer_sequence<int, G...>) {
  return {&pass<G + 1>...};
}
constexpr auto kPasses = pass_table(std::make_integer_sequence<int, kTaps>{});

size_t align64(size_t b) { return (b + 63) / 64 * 64; }

// in: x, dy  out: dw (, db)
class ConvBwdWeightTaps final : public Kernel {
 public:
  explicit ConvBwdWeightTaps(const ConvParams& p) : p_(p), parts_(std::max(1, omp_get_max_threads())) {
    Hp_ = std::max(p.H + 2 * p.pad_h, p.OH + (p.R - 1) * p.dil_h);
    Wp_ = std::max(p.W + 2 * p.pad_w, p.OW + (p.S - 1) * p.dil_w);
    P_ = (p.OH * Wp_ + kLanes - 1) / kLanes * kLanes;
    taps_ = p.C * p.R * p.S;
    for (int64_t c = 0; c < p.C; ++c)
      for (int64_t r = 0; r < p.R; ++r)
        for (int64_t s = 0; s < p.S; ++s) off_.push_back(c * Hp_ * Wp_ + r * p.dil_h * Wp_ + s * p.dil_w);
    // The taps in passes of nearly equal size (25 in 5 x 5 or 9 x <= 3).
    const int64_t passes = (taps_ + kTaps - 1) / kTaps;
    for (int64_t i = 0, t0 = 0; i < passes; ++i) {
      const int64_t g = (taps_ - t0) / (passes - i);
      groups_.push_back({t0, g});
      t0 += g;
    }
    // Per part: the padded image (with room for the last chunk's reach), its
    // dy in rows of Wp, the double sums.
    img_ = align64(sizeof(float) * static_cast<size_t>(p.C * Hp_ * Wp_ + Wp_ + kLanes));
    dy_ = align64(sizeof(float) * static_cast<size_t>(p.K * P_));
    acc_ = align64(sizeof(double) * static_cast<size_t>((taps_ + 1) * p.K));
  }
  const char* name() const override { return "cpu.conv2d_bwd_weight_taps"; }
  size_t scratch_bytes() const override { return (img_ + dy_ + acc_) * static_cast<size_t>(parts_); }
  void run(const StepContext&) override {
    const int64_t work = p_.N * p_.OH * p_.OW * taps_ * p_.K;
    if (use_team(work) && parts_ > 1) {
#pragma omp parallel for schedule(static)
      for (int64_t q = 0; q < parts_; ++q) run_part(q);
    } else {
      for (int64_t q = 0; q < parts_; ++q) run_part(q);
    }
    float* dw = out<float>(0);
    float* db = p_.bias ? out<float>(1) : nullptr;
    for (int64_t t = 0; t < taps_ + (db ? 1 : 0); ++t)
      for (int64_t k = 0; k < p_.K; ++k) {
        double s = 0;
        for (int64_t q = 0; q < parts_; ++q) s += acc_of(q)[t * p_.K + k];
        if (t < taps_) dw[k * taps_ + t] = static_cast<float>(s);
        else db[k] = static_cast<float>(s);
      }
  }

 private:
  char* part_base(int64_t q) const { return static_cast<char*>(scratch_) + (img_ + dy_ + acc_) * size_t(q); }
  double* acc_of(int64_t q) const { return reinterpret_cast<double*>(part_base(q) + img_ + dy_); }

  // Images [N q / parts, N (q+1) / parts).
  void run_part(int64_t q) const {
    const ConvParams& p = p_;
    float* xp = reinterpret_cast<float*>(part_base(q));
    float* dyp = reinterpret_cast<float*>(part_base(q) + img_);
    double* acc = acc_of(q);
    std::fill_n(acc, (taps_ + 1) * p.K, 0.0);
    std::fill_n(xp, p.C * Hp_ * Wp_ + Wp_ + kLanes, 0.0f);
    std::fill_n(dyp, p.K * P_, 0.0f);
    const float* x = in<float>(0);
    const float* dy = in<float>(1);
    const int64_t ohw = p.OH * p.OW;
    for (int64_t n = p.N * q / parts_; n < p.N * (q + 1) / parts_; ++n) {
      for (int64_t c = 0; c < p.C; ++c)
        for (int64_t h = 0; h < p.H; ++h)
          std::memcpy(xp + (c * Hp_ + h + p.pad_h) * Wp_ + p.pad_w, x + ((n * p.C + c) * p.H + h) * p.W,
                      sizeof(float) * static_cast<size_t>(p.W));
      const float* dyn = dy + n * p.K * ohw;
      for (int64_t k = 0; k < p.K; ++k)
        for (int64_t oh = 0; oh < p.OH; ++oh)
          std::memcpy(dyp + k * P_ + oh * Wp_, dyn + k * ohw + oh * p.OW, sizeof(float) * static_cast<size_t>(p.OW));
      for (int64_t k0 = 0; k0 < p.K; k0 += kChannels)
        for (const auto& [t0, g] : groups_) {
          float part[kChannels * kTaps];
          kPasses[static_cast<size_t>(g - 1)](xp, dyp + k0 * P_, P_, P_, off_.data() + t0, part);
          for (int64_t j = 0; j < kChannels; ++j)
            for (int64_t t = 0; t < g; ++t) acc[(t0 + t) * p.K + k0 + j] += static_cast<double>(part[j * g + t]);
        }
      if (p.bias)
        for (int64_t k = 0; k < p.K; ++k) {
          FV v{};
          for (int64_t i = 0; i < P_; i += kLanes) v += *reinterpret_cast<const FVu*>(dyp + k * P_ + i);
          float s = 0;
          for (int l = 0; l < kLanes; ++l) s += v[l];
          acc[taps_ * p.K + k] += static_cast<double>(s);
        }
    }
  }

  ConvParams p_;
  int64_t parts_;
  int64_t Hp_ = 0, Wp_ = 0, P_ = 0, taps_ = 0;
  std::vector<int64_t> off_;
  std::vector<std::pair<int64_t, int64_t>> groups_;  // (first tap, taps) per pass
  size_t img_ = 0, dy_ = 0, acc_ = 0;
};

}  // namespace

bool conv2d_bwd_weight_taps_takes(const ConvParams& p) {
  return p.groups == 1 && p.stride_h == 1 && p.stride_w == 1 && p.C * p.R * p.S <= kConvMaxTaps &&
         p.K % kChannels == 0 && p.N > 0 && p.OH > 0 && p.OW > 0;
}

std::unique_ptr<Kernel> make_conv2d_bwd_weight_taps(const ConvParams& p) {
  if (!conv2d_bwd_weight_taps_takes(p)) return nullptr;
  return std::make_unique<ConvBwdWeightTaps>(p);
}

bool few_taps_preferred(const ConvParams& p) {
  return p.C <= 3 && conv2d_bwd_weight_taps_takes(p) && machine_info().onednn_isa.find("avx512") == std::string::npos;
}

}  // namespace memfit::kernels::cpu
