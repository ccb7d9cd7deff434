// Winograd F(m x m, 3 x 3) convolutions, m = 2 or 4: the forward and
// backward-data of a 3x3 stride-1 convolution, f32, activations blocked
// (nChw16c).
//
// Each m x m block of outputs (a tile) comes from an (m + 2) x (m + 2)
// patch of the input d and the 3 x 3 filter g as
//   y = A^T [ sum over input channels (G g G^T) . (B^T d B) ] A
// (. element-wise): (m + 2)^2 products per tile and channel pair instead of
// 9 m^2, 16 instead of 36 for F(2,3), 36 instead of 144 for F(4,3). The
// product is (m + 2)^2 matrix products, one per point of the transformed
// tile, of [tiles x Cin] by [Cin x Cout]. F(2,3)'s transforms only add,
// subtract and halve; F(4,3)'s multiply by up to 5 and by 1/6, 1/12, 1/24,
// so its rounding error is some 10-20 times F(2,3)'s (both within a bound
// the tests check, tests/test_cpu_kernels.cpp WinogradConvolution; measured
// on ResNet-18's shapes with bench/conv_bench.cpp: the largest error
// relative to the largest output 3-9e-7 for F(2,3), 0.7-2e-5 for F(4,3),
// 0.3-2.6e-6 for oneDNN's direct kernel).
//
// The work runs fused, a block of tiles at a time, so that the transformed
// input ((m + 2)^2 x tiles x Cin) and products (the same for a chunk of 64
// output channels) stay in the core's L2 cache: written to memory whole they
// cost as much time as the saved products on a 2-core machine. The
// transformed filters U = G g G^T ((m + 2)^2 x Cin x Cout) are made once per
// run (the weights change every step), packed for the product's inner loop;
// where they would take more than 8 MiB of scratch, a group of output
// channels at a time, every block's products for one group before the next
// (a part that holds one block keeps its input transform for all groups).
//
// The product's inner loop holds kRows tiles x kCols output channels of
// sums in registers (6 x 16 with AVX2's 16 registers, 12 x 32 with
// AVX-512's 32) and walks the input channels.
//
// Backward-data is the same convolution of dy with the filters turned by 180
// degrees and their channels swapped (g[c][k][r][s] = w[k][c][2-r][2-s]),
// padded by 2 - pad.
//
// Measured (bench/conv_bench, ResNet-18's four 3x3 stride-1 shapes on 28 x
// 28 at batch 64, forward and backward-data, 2 threads, Xeon): with oneDNN
// limited to AVX2 and this file built for x86-64-v3, all eight 204 ms
// direct, 164 ms F(2,3), 123 ms F(4,3); with AVX-512 94, 73 and 63 ms. Which
// one a shape takes is a rule drawn from these measurements (winograd_tile,
// ops/conv/cpu.cpp; the forward takes F(2,3) at most, for its accuracy).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <utility>
#include <vector>
#include <cstring>
#include <memory>

#include "kernels/cpu/parallel.hpp"
#include "ops/conv/cpu.hpp"

namespace memfit::kernels::cpu {
namespace {

#if defined(__AVX512F__)
constexpr int kLanes = 16, kRows = 12;
#else
constexpr int kLanes = 8, kRows = 6;
#endif
constexpr int kCV = 2, kCols = kCV * kLanes;  // output channels per register block
constexpr int kBlk = 16;                      // the activations' channel block (nChw16c)
typedef float FV __attribute__((vector_size(4 * kLanes)));
typedef float FVu __attribute__((vector_size(4 * kLanes), aligned(4)));
typedef float F16 __attribute__((vector_size(64)));
typedef float FK __attribute__((vector_size(4 * kCols)));
typedef float FKu __attribute__((vector_size(4 * kCols), aligned(4)));
typedef float F16u __attribute__((vector_size(64), aligned(4)));

// kLanes consecutive values from p: f32 as they are, bf16 (its 16 bits the
// high half of an f32) widened exactly.
inline FV load(const float* p) { return *reinterpret_cast<const FVu*>(p); }
inline FV load(const uint16_t* p) {
#if defined(__AVX512F__)
  // (The masked forms: GCC 12 warns of the unmasked ones' undefined start.)
  const __mmask16 all = 0xffff;
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return reinterpret_cast<FV>(_mm512_maskz_slli_epi32(all, _mm512_maskz_cvtepu16_epi32(all, h), 16));
#else
  return reinterpret_cast<FV>(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
#endif
}

// *p in every lane (one broadcast load; FV{} + *p would add a zero first).
inline FV broadcast(const float* p) {
#if defined(__AVX512F__)
  return reinterpret_cast<FV>(_mm512_set1_ps(*p));
#else
  return reinterpret_cast<FV>(_mm256_broadcast_ss(p));
#endif
}

size_t align64(size_t b) { return (b + 63) / 64 * 64; }

// out[o][i][j] = sum over c, r, s of g[o][c][r][s] in[c][i - pad_h + r][j - pad_w + s]
// (+ bias[o]), for i < OH, j < OW; in is [N][Cin/16][H][W][16], out
// [N][Cout/16][OH][OW][16].
struct Shape {
  int64_t N, Cin, H, W, Cout, OH, OW, pad_h, pad_w;
  bool turned;  // g[o][c][r][s] = w[c][o][2-r][2-s] (backward-data); else w[o][c][r][s]
  bool bias;
};

// One register block of the Winograd products, both directions' form:
//   m[r][0 : NV vectors] (rows ldm apart) = (kAdd ? m[r][...] : 0) + sum over
//   k < K of a(r, k) b[k][0 : NV vectors] (b's rows ldb apart),
// a(r, k) = a[r * lda + k] (the forward and backward-data: a tile's
// transformed inputs, the sum over channels) or, with kRowsUnit, a[k * lda
// + r] (the weight gradient: dy's transforms, the sum over tiles). Every
// loop over acc is unrolled whole, so that the sums live in registers (with
// a loop left rolled GCC kept acc in memory and stored each sum after every
// multiply-add, one store per FMA).
template <int R, int NV, bool kAdd, bool kRowsUnit>
void product_block(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t K, float* m, int64_t ldm) {
  FV acc[R][NV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[r][v] = kAdd ? *reinterpret_cast<const FVu*>(m + r * ldm + v * kLanes) : FV{};
  for (int64_t k = 0; k < K; ++k) {
    FV bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) bv[v] = *reinterpret_cast<const FVu*>(b + k * ldb + v * kLanes);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const FV av = broadcast(kRowsUnit ? a + k * lda + r : a + r * lda + k);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] += av * bv[v];
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) *reinterpret_cast<FVu*>(m + r * ldm + v * kLanes) = acc[r][v];
}

// The transforms of F(m x m, 3 x 3), one dimension at a time (the 2-D
// transform applies them along the columns, then the rows), on vectors of
// channels. kA = m + 2 inputs per tile side.
//   F(2, 3): B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],
//            G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1], A^T = [1 1 1 0; 0 1 -1 -1].
//   F(4, 3): B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1],
//            G = [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6; 1/24 1/12 1/6; 1/24 -1/12 1/6; 0 0 1],
//            A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1].
template <int M>
struct Tf;

template <>
struct Tf<2> {
  static constexpr int kA = 4;
  template <class T>
  static void input(const T* d, T* o) {
    o[0] = d[0] - d[2];
    o[1] = d[1] + d[2];
    o[2] = d[2] - d[1];
    o[3] = d[1] - d[3];
  }
  template <class T>
  static void filter(const T* g, T* o) {
    o[0] = g[0];
    o[1] = 0.5f * (g[0] + g[1] + g[2]);
    o[2] = 0.5f * (g[0] - g[1] + g[2]);
    o[3] = g[2];
  }
  template <class T>
  static void output(const T* m, T* o) {
    o[0] = m[0] + m[1] + m[2];
    o[1] = m[1] - m[2] - m[3];
  }
};

template <>
struct Tf<4> {
  static constexpr int kA = 6;
  template <class T>
  static void input(const T* d, T* o) {
    o[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];
    o[1] = (d[3] + d[4]) - 4.0f * (d[1] + d[2]);
    o[2] = 4.0f * (d[1] - d[2]) + (d[4] - d[3]);
    o[3] = 2.0f * (d[3] - d[1]) + (d[4] - d[2]);
    o[4] = 2.0f * (d[1] - d[3]) + (d[4] - d[2]);
    o[5] = 4.0f * d[1] - 5.0f * d[3] + d[5];
  }
  template <class T>
  static void filter(const T* g, T* o) {
    o[0] = 0.25f * g[0];
    o[1] = (-1.0f / 6) * (g[0] + g[1] + g[2]);
    o[2] = (-1.0f / 6) * (g[0] - g[1] + g[2]);
    o[3] = (1.0f / 24) * g[0] + (1.0f / 12) * g[1] + (1.0f / 6) * g[2];
    o[4] = (1.0f / 24) * g[0] - (1.0f / 12) * g[1] + (1.0f / 6) * g[2];
    o[5] = g[2];
  }
  template <class T>
  static void output(const T* m, T* o) {
    const T a = m[1] + m[2], b = m[1] - m[2], c = m[3] + m[4], d = m[3] - m[4];
    o[0] = m[0] + a + c;
    o[1] = b + 2.0f * d;
    o[2] = a + 4.0f * c;
    o[3] = b + 8.0f * d + m[5];
  }
};

// in: x (or dy), w (, b)  out: y (or dx)
template <int M>
class WinogradConv final : public Kernel {
  static constexpr int kA = Tf<M>::kA, kPos = kA * kA;

 public:
  // filter_bytes: the most scratch one group's transformed filters take.
  WinogradConv(const Shape& s, int64_t filter_bytes) : s_(s), parts_(std::max(1, omp_get_max_threads())) {
    TH_ = (s.OH + M - 1) / M;
    TW_ = (s.OW + M - 1) / M;
    T_ = s.N * TH_ * TW_;
    // Tiles per block: the transformed input (kPos x Tb x Cin) within ~768
    // KiB where that leaves at least 128 tiles (fewer would read the
    // transformed filters, kPos x Cin x Cout, too often for their
    // products); then as many blocks as that needs, a multiple of the
    // threads, sized alike.
    const int64_t target = std::max<int64_t>((int64_t(768) << 10) / (int64_t(4) * kPos * s.Cin), 128);
    int64_t blocks = std::max<int64_t>(1, (T_ + target - 1) / target);
    blocks = (blocks + parts_ - 1) / parts_ * parts_;
    Tb_ = std::max<int64_t>(1, (T_ + blocks - 1) / blocks);
    Tb_ = (Tb_ + kRows - 1) / kRows * kRows;
    Kc_ = std::min<int64_t>(s.Cout, 64);
    // Output channels whose filters are transformed together: all of them
    // where their transforms fit in filter_bytes, else as many chunks of
    // Kc_ as fit (at least one). A group's transforms are made, used by
    // every block, and replaced by the next group's: with 512 channels
    // F(4, 3)'s would be 36 MiB of scratch at once, 4.5 MiB a group.
    const int64_t per_channel = int64_t(sizeof(float)) * kPos * s.Cin;
    Kg_ = per_channel * s.Cout <= filter_bytes ? s.Cout
                                               : std::max<int64_t>(1, filter_bytes / (per_channel * Kc_)) * Kc_;
    Kg_ = std::min(Kg_, s.Cout);
    held_.assign(size_t(parts_), -1);
    u_ = align64(sizeof(float) * size_t(kPos * s.Cin * Kg_));
    // A point's rows start a cache line past a multiple of 4 KiB apart: at
    // power-of-two distances a tile's points would share one set of the L1
    // cache (at 64 channels x 192 tiles they did, 48 KiB apart).
    vs_ = Tb_ * s.Cin + 16;
    ms_ = Tb_ * Kc_ + 16;
    v_ = align64(sizeof(float) * size_t(kPos * vs_));
    m_ = align64(sizeof(float) * size_t(kPos * ms_));
  }
  const char* name() const override {
    if (M == 2) return s_.turned ? "cpu.conv2d_bwd_data_winograd2" : "cpu.conv2d_winograd2";
    return s_.turned ? "cpu.conv2d_bwd_data_winograd4" : "cpu.conv2d_winograd4";
  }
  size_t scratch_bytes() const override { return u_ + (v_ + m_) * size_t(parts_); }
  void run(const StepContext&) override {
    const int64_t blocks = (T_ + Tb_ - 1) / Tb_;
    std::fill(held_.begin(), held_.end(), -1);
    for (int64_t g0 = 0; g0 < s_.Cout; g0 += Kg_) {
      const int64_t gn = std::min(Kg_, s_.Cout - g0);
      transform_filters(g0, gn);
      parallel_region(T_ * s_.Cin * gn, [&] {
        const int64_t part = omp_get_thread_num(), team = omp_get_num_threads();
        for (int64_t b = part; b < blocks; b += team) {
          // Where every part has at most one block (few tiles, many
          // channels: the layers that take groups), its transform is made
          // once for all the groups.
          if (held_[size_t(part)] != b) {
            transform_block(b, part);
            held_[size_t(part)] = b;
          }
          run_block(b, part, g0, gn);
        }
      });
    }
  }

 private:
  float* u_buf() const { return static_cast<float*>(scratch_); }
  float* v_buf(int64_t part) const {
    return reinterpret_cast<float*>(static_cast<char*>(scratch_) + u_ + (v_ + m_) * size_t(part));
  }
  float* m_buf(int64_t part) const { return reinterpret_cast<float*>(reinterpret_cast<char*>(v_buf(part)) + v_); }

  // U[pos][(o - g0) / kCols][c][o % kCols] = (G g[o][c] G^T)[pos] for the
  // group's output channels [g0, g0 + gn): kCols output channels at a time,
  // in the lanes of a vector, so that each point's row of kCols values is
  // written whole.
  void transform_filters(int64_t g0, int64_t gn) const {
    const Shape& s = s_;
    const float* w = in<float>(1);
    float* U = u_buf();
    const int64_t ob = gn / kCols;
    parallel_for(ob, gn * s.Cin * 64, [&](int64_t b) {
      for (int64_t c = 0; c < s.Cin; ++c) {
        FK g[3][3];
        for (int l = 0; l < kCols; ++l) {
          const int64_t o = g0 + b * kCols + l;
          const float* src = s.turned ? w + (c * s.Cout + o) * 9 : w + (o * s.Cin + c) * 9;
          for (int t = 0; t < 9; ++t) {
            const int tt = s.turned ? 8 - t : t;
            g[tt / 3][tt % 3][l] = src[t];
          }
        }
        FK t[kA][3];  // G g, column by column
        for (int q = 0; q < 3; ++q) {
          const FK col[3] = {g[0][q], g[1][q], g[2][q]};
          FK o[kA];
          Tf<M>::filter(col, o);
          for (int i = 0; i < kA; ++i) t[i][q] = o[i];
        }
        for (int i = 0; i < kA; ++i) {
          FK u[kA];
          Tf<M>::filter(t[i], u);
          for (int j = 0; j < kA; ++j)
            *reinterpret_cast<FKu*>(U + ((int64_t(i * kA + j) * ob + b) * s.Cin + c) * kCols) = u[j];
        }
      }
    });
  }

  // V[pos][t][c] for the block's tiles: B^T d B.
  void transform_input(int64_t t0, int64_t tn, float* V) const {
    const Shape& s = s_;
    const float* x = in<float>(0);
    const int64_t cb = s.Cin / kBlk;
    for (int64_t t = 0; t < tn; ++t) {
      const int64_t g = t0 + t, n = g / (TH_ * TW_), th = g / TW_ % TH_, tw = g % TW_;
      const int64_t h0 = th * M - s.pad_h, w0 = tw * M - s.pad_w;
      const bool inside = h0 >= 0 && w0 >= 0 && h0 + kA <= s.H && w0 + kA <= s.W;
      for (int64_t b = 0; b < cb; ++b) {
        const float* xb = x + (n * cb + b) * s.H * s.W * kBlk;
        F16 d[kA][kA];
        if (inside) {
          for (int i = 0; i < kA; ++i)
            for (int j = 0; j < kA; ++j) d[i][j] = *reinterpret_cast<const F16u*>(xb + ((h0 + i) * s.W + w0 + j) * kBlk);
        } else {
          for (int i = 0; i < kA; ++i)
            for (int j = 0; j < kA; ++j) {
              const int64_t h = h0 + i, w = w0 + j;
              d[i][j] = (h >= 0 && h < s.H && w >= 0 && w < s.W)
                            ? *reinterpret_cast<const F16u*>(xb + (h * s.W + w) * kBlk)
                            : F16{};
            }
        }
        F16 e[kA][kA];  // B^T d
        for (int j = 0; j < kA; ++j) {
          F16 col[kA], o[kA];
          for (int i = 0; i < kA; ++i) col[i] = d[i][j];
          Tf<M>::input(col, o);
          for (int i = 0; i < kA; ++i) e[i][j] = o[i];
        }
        for (int i = 0; i < kA; ++i) {
          F16 v[kA];
          Tf<M>::input(e[i], v);
          for (int j = 0; j < kA; ++j) *reinterpret_cast<F16u*>(V + (i * kA + j) * vs_ + t * s.Cin + b * kBlk) = v[j];
        }
      }
    }
  }

  // The outputs of the block's tiles for channels [k0, k0 + kn): A^T m A,
  // from M[pos][t][k - k0].
  void transform_output(int64_t t0, int64_t tn, int64_t k0, int64_t kn, const float* Mb) const {
    const Shape& s = s_;
    float* y = out<float>(0);
    const float* bias = s.bias ? in<float>(2) : nullptr;
    const int64_t kb = s.Cout / kBlk;
    for (int64_t t = 0; t < tn; ++t) {
      const int64_t g = t0 + t, n = g / (TH_ * TW_), th = g / TW_ % TH_, tw = g % TW_;
      const int64_t h0 = th * M, w0 = tw * M;
      for (int64_t k = 0; k < kn; k += kBlk) {
        F16 a[M][kA];  // A^T m
        for (int j = 0; j < kA; ++j) {
          F16 col[kA], o[M];
          for (int i = 0; i < kA; ++i) col[i] = *reinterpret_cast<const F16u*>(Mb + (i * kA + j) * ms_ + t * Kc_ + k);
          Tf<M>::output(col, o);
          for (int i = 0; i < M; ++i) a[i][j] = o[i];
        }
        const F16 b = bias ? *reinterpret_cast<const F16u*>(bias + k0 + k) : F16{};
        float* yb = y + (n * kb + (k0 + k) / kBlk) * s.OH * s.OW * kBlk;
        for (int i = 0; i < M && h0 + i < s.OH; ++i) {
          F16 o[M];
          Tf<M>::output(a[i], o);
          for (int j = 0; j < M && w0 + j < s.OW; ++j)
            *reinterpret_cast<F16u*>(yb + ((h0 + i) * s.OW + w0 + j) * kBlk) = o[j] + b;
        }
      }
    }
  }

  // Block b's input transform into the part's V.
  void transform_block(int64_t b, int64_t part) const {
    const Shape& s = s_;
    const int64_t t0 = b * Tb_, tn = std::min(Tb_, T_ - t0), rows = (tn + kRows - 1) / kRows * kRows;
    float* V = v_buf(part);
    transform_input(t0, tn, V);
    if (rows > tn)  // the last register block's missing tiles: zeros (their sums are not stored)
      for (int pos = 0; pos < kPos; ++pos) std::fill_n(V + pos * vs_ + tn * s.Cin, (rows - tn) * s.Cin, 0.0f);
  }

  // Block b's outputs for the group's channels [g0, g0 + gn), from the
  // part's V (transform_block) and the group's U.
  void run_block(int64_t b, int64_t part, int64_t g0, int64_t gn) const {
    const Shape& s = s_;
    const int64_t t0 = b * Tb_, tn = std::min(Tb_, T_ - t0), rows = (tn + kRows - 1) / kRows * kRows;
    const float* V = v_buf(part);
    float* Mb = m_buf(part);
    const float* U = u_buf();
    const int64_t ob = gn / kCols;
    for (int64_t k0 = g0; k0 < g0 + gn; k0 += Kc_) {
      const int64_t kn = std::min(Kc_, g0 + gn - k0);
      for (int pos = 0; pos < kPos; ++pos)
        for (int64_t j = 0; j < kn; j += kCols) {
          const float* u = U + ((pos * ob + (k0 - g0 + j) / kCols) * s.Cin) * kCols;
          for (int64_t r = 0; r < rows; r += kRows)
            product_block<kRows, kCV, false, false>(V + pos * vs_ + r * s.Cin, s.Cin, u, kCols, s.Cin,
                                                     Mb + pos * ms_ + r * Kc_ + j, Kc_);
        }
      transform_output(t0, tn, k0, kn, Mb);
    }
  }

  Shape s_;
  int64_t parts_;
  int64_t TH_ = 0, TW_ = 0, T_ = 0, Tb_ = 0, Kc_ = 0, Kg_ = 0;
  std::vector<int64_t> held_;  // per part: the block whose input transform its V holds (-1: none)
  int64_t vs_ = 0, ms_ = 0;  // floats from one point's rows to the next's, in V and M
  size_t u_ = 0, v_ = 0, m_ = 0;
};

// The weight gradient, dw[o][c][r][s] = sum over n, i, j of dy[n][o][i][j]
// x[n][c][i - pad_h + r][j - pad_w + s], by the transpose of F(2 x 2, 3 x 3):
// in one dimension y = A^T [(G g) . (B^T d)] gives dL/dg = G^T [(A dy) .
// (B^T d)], so each 2 x 2 tile of dy and the 4 x 4 patch of x under it give
//   dw += G^T [(A dy A^T) . (B^T d B)] G,
// 16 products per tile and channel pair instead of 36. The sum over tiles
// runs in the transformed domain: M[pos][o][c] = sum over tiles t of
// DY[pos][t][o] V[pos][t][c], 16 matrix products of [K x tiles] by [tiles x
// C] whose inner dimension is the tiles; dw = G^T M G once at the end.
//   A = [1 0; 1 1; 1 -1; 0 -1] (A dy: dy0, dy0 + dy1, dy0 - dy1, -dy1),
//   G^T = [1 1/2 1/2 0; 0 1/2 -1/2 0; 0 1/2 1/2 1].
//
// The work is split into chunks of at most 64 output by 64 input channels
// (so that a chunk's M, 16 x 64 x 64 floats, stays in the core's L2 cache
// beside a block's transforms) and, where there are fewer chunks than
// threads, the tiles into ranges whose partial sums are added at the end.
// A chunk walks its tiles a block of kTb at a time: the block's x patches
// are transformed for the chunk's input channels (V[pos][t][c]), its dy
// tiles for the chunk's output channels (DY[pos][t][o]), and each point's
// product adds into M in registers, kRows output channels by kCols input
// channels. Each input patch is transformed once per chunk of output
// channels (and each dy tile once per chunk of input channels): about a
// tenth more work than the products' saved share, for data that stays in
// cache.
struct WShape {
  int64_t N, C, H, W, K, OH, OW, pad_h, pad_w;
  bool bias;
};

// The weight gradient's register block: kWRows output channels by kWCV
// vectors of input channels.
// (12 x 2 and 6 x 2 as the forward's; 6 x 4 and 3 x 4 measured no faster.)
constexpr int kWRows = kRows, kWCV = kCV;

using WgradFn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, float*, int64_t);
template <int R, int... Vs>
constexpr std::array<WgradFn, sizeof...(Vs)> wgrad_row(std::integer_sequence<int, Vs...>) {
  return {&product_block<R, Vs + 1, true, true>...};
}
template <int... Rs>
constexpr std::array<std::array<WgradFn, kWCV>, sizeof...(Rs)> wgrad_table(std::integer_sequence<int, Rs...>) {
  return {wgrad_row<Rs + 1>(std::make_integer_sequence<int, kWCV>{})...};
}
// kWgrad[R - 1][NV - 1]: a block of R output channels by NV vectors of input
// channels (a chunk's last rows or columns may be fewer than kWRows, kWCV).
constexpr auto kWgrad = wgrad_table(std::make_integer_sequence<int, kWRows>{});

// in: x, dy (f32, or bf16 as uint16_t: In)  out: dw (, db) f32. bf16 inputs
// are widened exactly as the transforms load them: the same sums as on their
// f32 copies, without making them.
template <class In>
class WinogradBwdWeight final : public Kernel {
  static constexpr int kA = 4, kPos = 16;
  static constexpr int64_t kTb = 64;    // tiles per block
  static constexpr int64_t kChunk = 64;  // channels per chunk, each side

 public:
  explicit WinogradBwdWeight(const WShape& s) : s_(s), parts_(std::max(1, omp_get_max_threads())) {
    TH_ = (s.OH + 1) / 2;
    TW_ = (s.OW + 1) / 2;
    T_ = s.N * TH_ * TW_;
    Kc_ = std::min(s.K, kChunk);
    Cc_ = std::min(s.C, kChunk);
    nK_ = (s.K + Kc_ - 1) / Kc_;
    nC_ = (s.C + Cc_ - 1) / Cc_;
    const int64_t pairs = nK_ * nC_;
    S_ = pairs >= parts_ ? 1 : std::min<int64_t>((parts_ + pairs - 1) / pairs, std::max<int64_t>(1, T_ / kTb));
    // A point's rows start a cache line past a multiple of 4 KiB apart (see WinogradConv).
    vs_ = kTb * Cc_ + 16;
    ds_ = kTb * Kc_ + 16;
    ms_ = Kc_ * Cc_ + 16;
    part_ = align64(sizeof(float) * size_t(kPos * (vs_ + ds_ + ms_)));
    partials_ = S_ > 1 ? align64(sizeof(float) * size_t(S_ * pairs * kPos * ms_)) : 0;
  }
  const char* name() const override {
    return sizeof(In) == 2 ? "cpu.conv2d_bwd_weight_winograd2.bf16" : "cpu.conv2d_bwd_weight_winograd2";
  }
  size_t scratch_bytes() const override { return partials_ + part_ * size_t(parts_); }
  void run(const StepContext&) override {
    if (s_.bias) bias_gradient();
    const int64_t pairs = nK_ * nC_, items = pairs * S_;
    parallel_region(T_ * s_.C * s_.K, [&] {
      const int64_t part = omp_get_thread_num(), team = omp_get_num_threads();
      for (int64_t i = part; i < items; i += team) run_item(i, part);
      if (S_ == 1) return;
#pragma omp barrier
      for (int64_t pair = part; pair < pairs; pair += team) {
        float* first = partial(pair, 0);
        for (int64_t k = 1; k < S_; ++k) {
          const float* more = partial(pair, k);
          for (int64_t i = 0; i < kPos * ms_; ++i) first[i] += more[i];
        }
        output(pair, first);
      }
    });
  }

 private:
  float* v_buf(int64_t part) const {
    return reinterpret_cast<float*>(static_cast<char*>(scratch_) + partials_ + part_ * size_t(part));
  }
  float* dy_buf(int64_t part) const { return v_buf(part) + kPos * vs_; }
  float* m_buf(int64_t part) const { return dy_buf(part) + kPos * ds_; }
  float* partial(int64_t pair, int64_t k) const {
    return static_cast<float*>(scratch_) + (k * nK_ * nC_ + pair) * kPos * ms_;
  }
  int64_t kn(int64_t pair) const { return std::min(Kc_, s_.K - pair / nC_ * Kc_); }
  int64_t cn(int64_t pair) const { return std::min(Cc_, s_.C - pair % nC_ * Cc_); }

  // db[o] = sum over n, i, j of dy[n][o][i][j].
  void bias_gradient() const {
    const WShape& s = s_;
    const In* dy = in<In>(1);
    float* db = out<float>(1);
    const int64_t kb = s.K / kBlk, hw = s.OH * s.OW;
    constexpr int kV = kBlk / kLanes;  // vectors per channel block
    parallel_for(kb, s.N * s.K * hw, [&](int64_t b) {
      FV sum[kV] = {};
      for (int64_t n = 0; n < s.N; ++n) {
        const In* p = dy + (n * kb + b) * hw * kBlk;
        FV img[kV] = {};
        for (int64_t i = 0; i < hw; ++i)
          for (int v = 0; v < kV; ++v) img[v] += load(p + i * kBlk + v * kLanes);
        for (int v = 0; v < kV; ++v) sum[v] += img[v];
      }
      for (int v = 0; v < kV; ++v) *reinterpret_cast<FVu*>(db + b * kBlk + v * kLanes) = sum[v];
    });
  }

  // V[pos][t][c - c0] = (B^T d B)[pos] for the block's tiles and channels [c0, c0 + cn).
  void transform_x(int64_t t0, int64_t tn, int64_t c0, int64_t cn, float* V) const {
    const WShape& s = s_;
    const In* x = in<In>(0);
    const int64_t cb = s.C / kBlk;
    for (int64_t t = 0; t < tn; ++t) {
      const int64_t g = t0 + t, n = g / (TH_ * TW_), th = g / TW_ % TH_, tw = g % TW_;
      const int64_t h0 = th * 2 - s.pad_h, w0 = tw * 2 - s.pad_w;
      const bool inside = h0 >= 0 && w0 >= 0 && h0 + kA <= s.H && w0 + kA <= s.W;
      for (int64_t c = 0; c < cn; c += kBlk) {
        const In* xb = x + (n * cb + (c0 + c) / kBlk) * s.H * s.W * kBlk;
        // kLanes channels at a time (AVX2's registers hold half a block).
        for (int l = 0; l < kBlk; l += kLanes) {
          FV e[kA][kA];  // d B, row by row
          for (int i = 0; i < kA; ++i) {
            const int64_t h = h0 + i;
            FV row[kA];
            if (inside) {
              for (int j = 0; j < kA; ++j) row[j] = load(xb + (h * s.W + w0 + j) * kBlk + l);
            } else {
              for (int j = 0; j < kA; ++j) {
                const int64_t w = w0 + j;
                row[j] = h >= 0 && h < s.H && w >= 0 && w < s.W
                             ? load(xb + (h * s.W + w) * kBlk + l)
                             : FV{};
              }
            }
            Tf<2>::input(row, e[i]);
          }
          for (int j = 0; j < kA; ++j) {
            FV col[kA], v[kA];
            for (int i = 0; i < kA; ++i) col[i] = e[i][j];
            Tf<2>::input(col, v);
            for (int i = 0; i < kA; ++i) *reinterpret_cast<FVu*>(V + (i * kA + j) * vs_ + t * cn + c + l) = v[i];
          }
        }
      }
    }
  }

  // DY[pos][t][o - o0] = (A dy A^T)[pos] for the block's tiles and channels [o0, o0 + kn).
  void transform_dy(int64_t t0, int64_t tn, int64_t o0, int64_t kn, float* DY) const {
    const WShape& s = s_;
    const In* dy = in<In>(1);
    const int64_t kb = s.K / kBlk;
    auto a = [](const FV& d0, const FV& d1, FV* o) {
      o[0] = d0;
      o[1] = d0 + d1;
      o[2] = d0 - d1;
      o[3] = -d1;
    };
    for (int64_t t = 0; t < tn; ++t) {
      const int64_t g = t0 + t, n = g / (TH_ * TW_), th = g / TW_ % TH_, tw = g % TW_;
      const int64_t h0 = th * 2, w0 = tw * 2;
      const bool h1 = h0 + 1 < s.OH, w1 = w0 + 1 < s.OW;  // the tile's second row, column inside
      for (int64_t k = 0; k < kn; k += kBlk) {
        const In* p = dy + ((n * kb + (o0 + k) / kBlk) * s.OH * s.OW + h0 * s.OW + w0) * kBlk;
        for (int l = 0; l < kBlk; l += kLanes) {
          const FV d00 = load(p + l);
          const FV d01 = w1 ? load(p + kBlk + l) : FV{};
          const FV d10 = h1 ? load(p + s.OW * kBlk + l) : FV{};
          const FV d11 = h1 && w1 ? load(p + (s.OW + 1) * kBlk + l) : FV{};
          FV r0[kA], r1[kA];  // dy A^T, row by row
          a(d00, d01, r0);
          a(d10, d11, r1);
          for (int j = 0; j < kA; ++j) {
            FV col[kA];
            a(r0[j], r1[j], col);
            for (int i = 0; i < kA; ++i) *reinterpret_cast<FVu*>(DY + (i * kA + j) * ds_ + t * kn + k + l) = col[i];
          }
        }
      }
    }
  }

  // Asks for the cache lines tiles [ta, tb) read, x's for channels [c0, c0 +
  // cn) and dy's for [o0, o0 + kn): the columns a tile does not share with
  // the one before it in its row.
  void prefetch(int64_t ta, int64_t tb, int64_t c0, int64_t cn, int64_t o0, int64_t kn) const {
    const WShape& s = s_;
    const In* x = in<In>(0);
    const In* dy = in<In>(1);
    const int64_t cb = s.C / kBlk, kb = s.K / kBlk;
    for (int64_t g = ta; g < tb; ++g) {
      const int64_t n = g / (TH_ * TW_), th = g / TW_ % TH_, tw = g % TW_;
      const int64_t h0 = th * 2 - s.pad_h, w0 = tw * 2 - s.pad_w;
      for (int64_t c = 0; c < cn; c += kBlk) {
        const In* xb = x + (n * cb + (c0 + c) / kBlk) * s.H * s.W * kBlk;
        for (int64_t h = std::max<int64_t>(h0, 0); h < std::min(h0 + kA, s.H); ++h)
          for (int64_t w = std::max(tw == 0 ? w0 : w0 + 2, int64_t(0)); w < std::min(w0 + kA, s.W); ++w)
            _mm_prefetch(reinterpret_cast<const char*>(xb + (h * s.W + w) * kBlk), _MM_HINT_T0);
      }
      for (int64_t k = 0; k < kn; k += kBlk) {
        const In* p = dy + (n * kb + (o0 + k) / kBlk) * s.OH * s.OW * kBlk;
        for (int64_t h = th * 2; h < std::min(th * 2 + 2, s.OH); ++h)
          for (int64_t w = tw * 2; w < std::min(tw * 2 + 2, s.OW); ++w)
            _mm_prefetch(reinterpret_cast<const char*>(p + (h * s.OW + w) * kBlk), _MM_HINT_T0);
      }
    }
  }

  // One chunk's sums over one range of tiles, into its M (or its partial).
  void run_item(int64_t item, int64_t part) const {
    const int64_t pair = item / S_, k = item % S_;
    const int64_t o0 = pair / nC_ * Kc_, c0 = pair % nC_ * Cc_, kn = this->kn(pair), cn = this->cn(pair);
    const int64_t t_begin = T_ * k / S_, t_end = T_ * (k + 1) / S_;
    float* V = v_buf(part);
    float* DY = dy_buf(part);
    float* M = S_ > 1 ? partial(pair, k) : m_buf(part);
    std::fill_n(M, kPos * ms_, 0.0f);
    for (int64_t t0 = t_begin; t0 < t_end; t0 += kTb) {
      const int64_t tn = std::min(kTb, t_end - t0);
      transform_x(t0, tn, c0, cn, V);
      transform_dy(t0, tn, o0, kn, DY);
      // The next block's x and dy come into the cache while this block's
      // products run (a sixteenth of its tiles before each point's).
      const int64_t next = t0 + kTb, nn = std::min(kTb, t_end - next);
      for (int pos = 0; pos < kPos; ++pos) {
        if (nn > 0) prefetch(next + nn * pos / kPos, next + nn * (pos + 1) / kPos, c0, cn, o0, kn);
        for (int64_t o = 0; o < kn; o += kWRows) {
          const int rows = static_cast<int>(std::min<int64_t>(kWRows, kn - o));
          for (int64_t c = 0; c < cn; c += kWCV * kLanes) {
            const int nv = static_cast<int>(std::min<int64_t>(kWCV, (cn - c) / kLanes));
            kWgrad[rows - 1][nv - 1](DY + pos * ds_ + o, kn, V + pos * vs_ + c, cn, tn, M + pos * ms_ + o * cn + c, cn);
          }
        }
      }
    }
    if (S_ == 1) output(pair, M);
  }

  // dw[o][c] = G^T M[.][o][c] G for the chunk's channels, kLanes input channels at a time.
  void output(int64_t pair, const float* M) const {
    const WShape& s = s_;
    float* dw = out<float>(0);
    const int64_t o0 = pair / nC_ * Kc_, c0 = pair % nC_ * Cc_, kn = this->kn(pair), cn = this->cn(pair);
    auto gt = [](const FV* m, FV* o) {  // G^T m
      const FV half = FV{} + 0.5f;
      o[0] = m[0] + half * (m[1] + m[2]);
      o[1] = half * (m[1] - m[2]);
      o[2] = half * (m[1] + m[2]) + m[3];
    };
    for (int64_t o = 0; o < kn; ++o)
      for (int64_t c = 0; c < cn; c += kLanes) {
        FV t[3][kA];  // G^T m, column by column
        for (int j = 0; j < kA; ++j) {
          FV col[kA], r[3];
          for (int i = 0; i < kA; ++i) col[i] = *reinterpret_cast<const FVu*>(M + (i * kA + j) * ms_ + o * cn + c);
          gt(col, r);
          for (int i = 0; i < 3; ++i) t[i][j] = r[i];
        }
        float taps[9][kLanes];
        for (int i = 0; i < 3; ++i) {
          FV r[3];
          gt(t[i], r);
          for (int j = 0; j < 3; ++j) *reinterpret_cast<FVu*>(taps[i * 3 + j]) = r[j];
        }
        float* dst = dw + ((o0 + o) * s.C + c0 + c) * 9;
        for (int l = 0; l < kLanes; ++l)
          for (int q = 0; q < 9; ++q) dst[l * 9 + q] = taps[q][l];
      }
  }

  WShape s_;
  int64_t parts_;
  int64_t TH_ = 0, TW_ = 0, T_ = 0, Kc_ = 0, Cc_ = 0, nK_ = 0, nC_ = 0, S_ = 1;
  int64_t vs_ = 0, ds_ = 0, ms_ = 0;  // floats from one point's rows to the next's, in V, DY and M
  size_t part_ = 0, partials_ = 0;
};

bool takes(const ConvParams& p) {
  return p.groups == 1 && p.R == 3 && p.S == 3 && p.stride_h == 1 && p.stride_w == 1 && p.dil_h == 1 &&
         p.dil_w == 1 && p.pad_h >= 0 && p.pad_h <= 2 && p.pad_w >= 0 && p.pad_w <= 2 && p.C % kBlk == 0 &&
         p.K % kBlk == 0 && p.C % kCols == 0 && p.K % kCols == 0 && p.N > 0 && p.OH > 0 && p.OW > 0;
}

// The most scratch one group of transformed filters takes by default. A
// kernel's scratch is live while it runs, beside the activations live then,
// so the largest one's adds to the plan's peak: ResNet-18 at batch 64 had
// 41.7 MiB of it with all of layer4's filters transformed at once, 37.7 MiB
// of them F(4, 3)'s for backward-data's 512 x 512 channels.
constexpr int64_t kFilterBytes = int64_t(8) << 20;

template <int M>
std::unique_ptr<Kernel> make(const Shape& s, size_t filter_bytes) {
  return std::make_unique<WinogradConv<M>>(s, filter_bytes ? int64_t(filter_bytes) : kFilterBytes);
}

}  // namespace

bool conv2d_winograd_takes(const ConvParams& p) { return takes(p); }

std::unique_ptr<Kernel> make_conv2d_winograd(const ConvParams& p, int tile, size_t filter_bytes) {
  if (!takes(p) || (tile != 2 && tile != 4)) return nullptr;
  const Shape s{p.N, p.C, p.H, p.W, p.K, p.OH, p.OW, p.pad_h, p.pad_w, false, p.bias};
  return tile == 2 ? make<2>(s, filter_bytes) : make<4>(s, filter_bytes);
}

std::unique_ptr<Kernel> make_conv2d_bwd_weight_winograd(const ConvParams& p, bool bf16_inputs) {
  if (!takes(p)) return nullptr;
  const WShape s{p.N, p.C, p.H, p.W, p.K, p.OH, p.OW, p.pad_h, p.pad_w, p.bias};
  if (bf16_inputs) return std::make_unique<WinogradBwdWeight<uint16_t>>(s);
  return std::make_unique<WinogradBwdWeight<float>>(s);
}

std::unique_ptr<Kernel> make_conv2d_bwd_data_winograd(const ConvParams& p, int tile, size_t filter_bytes) {
  if (!takes(p) || (tile != 2 && tile != 4)) return nullptr;
  const Shape s{p.N, p.K, p.OH, p.OW, p.C, p.H, p.W, 2 - p.pad_h, 2 - p.pad_w, true, false};
  return tile == 2 ? make<2>(s, filter_bytes) : make<4>(s, filter_bytes);
}

}  // namespace memfit::kernels::cpu
