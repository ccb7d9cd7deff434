// N batch, C channels, H/W input size, R/S window, OH/OW output size.
//
// Padding is symmetric (pad_l = pad_r = pad) but for max pooling's ceil
// mode, whose extra end padding (PoolParams::pad_h_end) never wins a max;
// oneDNN's output size is then the graph's and every window lies inside
// the padded input: "include padding" divides by R*S, as the graph's
// count_include_pad does; "exclude padding" by the valid elements.
//
// bf16 (act = BF16): max/avg pooling are oneDNN's bf16 pooling primitives on
// NCHW bf16 data; global average pooling is the f32 kernel's loop on bf16
// storage (AVX-512; f32 sums, one rounding of the mean; the backward rounds
// dy / HW once).
#include "ops/pool/cpu.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <immintrin.h>

#include "kernels/cpu/bf16_simd.hpp"
#include "kernels/cpu/dnnl_util.hpp"
#include "kernels/cpu/parallel.hpp"

namespace memfit::kernels::cpu {
namespace {

using dnnl::algorithm;
using dnnl::prop_kind;

struct PoolPds {
  dnnl::memory::desc x, y;
  dnnl::pooling_forward::primitive_desc fwd;
  dnnl::pooling_backward::primitive_desc bwd;
};

// Both directions are always built, so that forward and backward kernels for
// the same params agree on whether oneDNN handles them.
PoolPds pool_pds(const PoolParams& p, algorithm alg, ElemType act) {
  PoolPds d;
  if (act == ElemType::F32) {
    d.x = plain_f32({p.N, p.C, p.H, p.W});
    d.y = plain_f32({p.N, p.C, p.OH, p.OW});
  } else if (act == ElemType::BF16) {
    using tag = dnnl::memory::format_tag;
    d.x = dnnl::memory::desc({p.N, p.C, p.H, p.W}, dnnl::memory::data_type::bf16, tag::nchw);
    d.y = dnnl::memory::desc({p.N, p.C, p.OH, p.OW}, dnnl::memory::data_type::bf16, tag::nchw);
  } else {
    throw Unsupported{};
  }
  const dims strides{p.stride_h, p.stride_w}, kernel{p.R, p.S}, pad{p.pad_h, p.pad_w}, pad_end{p.end_pad_h(), p.end_pad_w()};
  dnnl::pooling_forward::desc fd(prop_kind::forward_training, alg, d.x, d.y, strides, kernel, pad, pad_end);
  d.fwd = {fd, user_scratchpad_attr(), engine()};
  dnnl::pooling_backward::desc bd(alg, d.x, d.y, strides, kernel, pad, pad_end);
  d.bwd = {bd, user_scratchpad_attr(), engine(), d.fwd};
  // The graph gives the workspace 4 bytes per output element.
  if (alg == algorithm::pooling_max &&
      d.fwd.workspace_desc().get_size() > static_cast<size_t>(p.N * p.C * p.OH * p.OW) * 4)
    throw Unsupported{};
  return d;
}

algorithm avg_alg(const PoolParams& p) {
  return p.count_include_pad ? algorithm::pooling_avg_include_padding : algorithm::pooling_avg_exclude_padding;
}

// in: x  out: y (, workspace)
class PoolFwd final : public Kernel {
 public:
  PoolFwd(const PoolParams& p, algorithm alg, ElemType act)
      : max_(alg == algorithm::pooling_max), bf16_(act == ElemType::BF16), d_(pool_pds(p, alg, act)) {
    call_.set(dnnl::pooling_forward(d_.fwd));
  }
  const char* name() const override {
    if (bf16_) return max_ ? "dnnl.max_pool2d.bf16" : "dnnl.avg_pool2d.bf16";
    return max_ ? "dnnl.max_pool2d" : "dnnl.avg_pool2d";
  }
  size_t scratch_bytes() const override { return scratchpad_bytes(d_.fwd); }
  void run(const StepContext&) override { call_.run(); }

 private:
  void on_bind() override {
    call_.clear_args();
    call_.arg(DNNL_ARG_SRC, d_.x, in_[0]);
    call_.arg(DNNL_ARG_DST, d_.y, out_[0]);
    if (max_) call_.arg(DNNL_ARG_WORKSPACE, d_.fwd.workspace_desc(), out_[1]);
    call_.arg(DNNL_ARG_SCRATCHPAD, d_.fwd.scratchpad_desc(), scratch_);
  }
  bool max_, bf16_;
  PoolPds d_;
  Call call_;
};

// in: dy (, workspace)  out: dx
class PoolBwd final : public Kernel {
 public:
  PoolBwd(const PoolParams& p, algorithm alg, ElemType act)
      : max_(alg == algorithm::pooling_max), bf16_(act == ElemType::BF16), d_(pool_pds(p, alg, act)) {
    call_.set(dnnl::pooling_backward(d_.bwd));
  }
  const char* name() const override {
    if (bf16_) return max_ ? "dnnl.max_pool2d_bwd.bf16" : "dnnl.avg_pool2d_bwd.bf16";
    return max_ ? "dnnl.max_pool2d_bwd" : "dnnl.avg_pool2d_bwd";
  }
  size_t scratch_bytes() const override { return scratchpad_bytes(d_.bwd); }
  void run(const StepContext&) override { call_.run(); }

 private:
  void on_bind() override {
    call_.clear_args();
    call_.arg(DNNL_ARG_DIFF_DST, d_.y, in_[0]);
    if (max_) call_.arg(DNNL_ARG_WORKSPACE, d_.bwd.workspace_desc(), in_[1]);
    call_.arg(DNNL_ARG_DIFF_SRC, d_.x, out_[0]);
    call_.arg(DNNL_ARG_SCRATCHPAD, d_.bwd.scratchpad_desc(), scratch_);
  }
  bool max_, bf16_;
  PoolPds d_;
  Call call_;
};

// Global average pooling, one template for both activation storage types
// (bf16: sums in f32 lanes, each output rounded once). Plain: rows of HW
// elements, one per (n, c). Blocked16: tiles of HW x 16, one per
// (n, channel block), the channels in the vector lanes.
template <class T>
class GlobalPool : public Kernel {
 public:
  GlobalPool(const GlobalPoolParams& p, Layout l) : p_(p), blocked_(l == Layout::Blocked16) {}

 protected:
  // "cpu.global_avg_pool" + op + (".blk16") + (".bf16")
  const char* name_of(bool bwd) const {
    static constexpr const char* kNames[2][2][2] = {
        {{"cpu.global_avg_pool", "cpu.global_avg_pool.bf16"},
         {"cpu.global_avg_pool.blk16", "cpu.global_avg_pool.blk16.bf16"}},
        {{"cpu.global_avg_pool_bwd", "cpu.global_avg_pool_bwd.bf16"},
         {"cpu.global_avg_pool_bwd.blk16", "cpu.global_avg_pool_bwd.blk16.bf16"}}};
    return kNames[bwd][blocked_][std::is_same_v<T, bf16_t>];
  }
  // f(t) for each Blocked16 tile or f(r) for each plain row.
  template <class F>
  void for_each(F&& f) const {
    const int64_t rows = p_.N * p_.C;
    parallel_for(blocked_ ? rows / kChannelBlock : rows, rows * p_.HW, f);
  }
  GlobalPoolParams p_;
  bool blocked_;
};

// Sum over the HW positions of a [HW][16] tile, in 16 f32 lanes: f32 tiles
// add the positions in order, bf16 tiles alternate two accumulators (the
// orders these kernels always had).
template <class T>
simd::V tile_sum(const T* xt, int64_t hw) {
  constexpr int K = std::is_same_v<T, bf16_t> ? 2 : 1;
  constexpr int64_t B = kChannelBlock;
  simd::V s[K];
  for (int k = 0; k < K; ++k) s[k] = simd::zero();
  int64_t i = 0;
  for (; i + K <= hw; i += K)
    for (int k = 0; k < K; ++k) s[k] = s[k] + simd::load(xt + (i + k) * B);
  if (i < hw) s[0] = s[0] + simd::load(xt + i * B);
  for (int k = 1; k < K; ++k) s[0] = s[0] + s[k];
  return s[0];
}

// Sum of a plain row: f32 the compiler's omp simd reduction, bf16 one
// 16-lane accumulator (the tail masked) summed across by simd::hsum.
using simd::row_sum;
#if MEMFIT_BF16_SIMD
float row_sum(const bf16_t* r, int64_t hw) {
  __m512 s = _mm512_setzero_ps();
  for (int64_t i = 0; i < hw; i += simd::kLanes) s = _mm512_add_ps(s, simd::load(r + i, simd::lanes(hw - i)));
  return simd::hsum(s);
}
#endif
float row_sum(const float* r, int64_t hw) { return row_sum(r, hw, [](float x) { return x; }); }

// in: x  out: y = mean of each (n, c)'s HW values
template <class T>
class GlobalAvgPool final : public GlobalPool<T> {
 public:
  using GlobalPool<T>::GlobalPool;
  const char* name() const override { return this->name_of(false); }
  void run(const StepContext&) override {
    constexpr int64_t B = kChannelBlock;
    const T* x = this->template in<T>(0);
    T* y = this->template out<T>(0);
    const int64_t hw = this->p_.HW;
    const float count = static_cast<float>(hw);
    if (this->blocked_) {
      const simd::V vc = simd::set1(count);
      return this->for_each([&](int64_t t) { simd::store(y + t * B, tile_sum(x + t * hw * B, hw) / vc); });
    }
    this->for_each([&](int64_t r) { y[r] = simd::from_f32<T>(row_sum(x + r * hw, hw) / count); });
  }
};

// in: dy  out: dx = dy / HW (rounded once) broadcast over each (n, c)'s HW positions
template <class T>
class GlobalAvgPoolBwd final : public GlobalPool<T> {
 public:
  using GlobalPool<T>::GlobalPool;
  const char* name() const override { return this->name_of(true); }
  void run(const StepContext&) override {
    constexpr int64_t B = kChannelBlock;
    const T* dy = this->template in<T>(0);
    T* dx = this->template out<T>(0);
    const int64_t hw = this->p_.HW;
    const float count = static_cast<float>(hw);
    if (this->blocked_) {
      const simd::V vc = simd::set1(count);
      return this->for_each([&](int64_t t) {
        T g[B];
        simd::store(g, simd::load(dy + t * B) / vc);
        T* dt = dx + t * hw * B;
        for (int64_t i = 0; i < hw; ++i) std::memcpy(dt + i * B, g, sizeof g);
      });
    }
    this->for_each([&](int64_t r) { std::fill_n(dx + r * hw, hw, simd::from_f32<T>(simd::to_f32(dy[r]) / count)); });
  }
};

// Max pooling over 2x2 windows at stride 2 without padding (the ConvNet's,
// VGG's), f32 on plain NCHW: memfit's own loops, taken where
// own_max_pool2x2 says, by the forward and the backward alike (the index
// output is theirs). The index is the reference kernel's: the flat position
// h W + w of the window's first maximum in row-major order, a NaN winning
// (the last one of a window). The windows do not overlap, so the backward
// writes every dx element once, dy where the index points and 0 elsewhere
// (the row and column no window covers where H or W is odd): one pass over
// dx, where oneDNN's zeroes dx and then scatters into it.
bool own_max_pool2x2(const PoolParams& p, ElemType act) {
  return act == ElemType::F32 && p.R == 2 && p.S == 2 && p.stride_h == 2 && p.stride_w == 2 && p.pad_h == 0 &&
         p.pad_w == 0 && p.end_pad_h() == 0 && p.end_pad_w() == 0 && p.OH == p.H / 2 && p.OW == p.W / 2 &&
         p.OH > 0 && p.OW > 0 && p.H * p.W <= INT32_MAX;
}

// One output row of MaxPool2x2: input rows r0, r1 (row 2 oh, whose flat
// position is base), outputs y and idx. Branch-free selects (a branch per
// comparison mispredicts on data); the restrict pointers let it vectorise.
void pool_row(const float* __restrict r0, const float* __restrict r1, float* __restrict y, int32_t* __restrict idx,
              int64_t OW, int32_t w, int32_t base) {
  int64_t ow = 0;
#if defined(__AVX512F__)
  // 16 outputs a round (the last masked): the window's four corners
  // de-interleaved from 32 input floats of each row.
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512i two = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  for (; ow < OW; ow += 16) {
    const int64_t n = std::min<int64_t>(16, OW - ow);
    const __mmask16 m = static_cast<__mmask16>((1u << n) - 1u);
    const __mmask16 m_lo = static_cast<__mmask16>(n >= 8 ? 0xffff : (1u << (2 * n)) - 1u);
    const __mmask16 m_hi = static_cast<__mmask16>(n > 8 ? (1u << (2 * (n - 8))) - 1u : 0);
    const float* p0 = r0 + 2 * ow;
    const float* p1 = r1 + 2 * ow;
    const __m512 lo0 = _mm512_maskz_loadu_ps(m_lo, p0), hi0 = _mm512_maskz_loadu_ps(m_hi, p0 + 16);
    const __m512 lo1 = _mm512_maskz_loadu_ps(m_lo, p1), hi1 = _mm512_maskz_loadu_ps(m_hi, p1 + 16);
    const __m512 a = _mm512_permutex2var_ps(lo0, even, hi0), b = _mm512_permutex2var_ps(lo0, odd, hi0);
    const __m512 c = _mm512_permutex2var_ps(lo1, even, hi1), d = _mm512_permutex2var_ps(lo1, odd, hi1);
    auto wins = [](__m512 v, __m512 best) {
      return static_cast<__mmask16>(_mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
    };
    __m512 best = a;
    __m512i k = _mm512_setzero_si512();
    __mmask16 t = wins(b, best);
    best = _mm512_mask_blend_ps(t, best, b);
    k = _mm512_mask_blend_epi32(t, k, _mm512_set1_epi32(1));
    t = wins(c, best);
    best = _mm512_mask_blend_ps(t, best, c);
    k = _mm512_mask_blend_epi32(t, k, _mm512_set1_epi32(w));
    t = wins(d, best);
    best = _mm512_mask_blend_ps(t, best, d);
    k = _mm512_mask_blend_epi32(t, k, _mm512_set1_epi32(w + 1));
    const __m512i at = _mm512_add_epi32(_mm512_set1_epi32(base + 2 * static_cast<int32_t>(ow)), two);
    _mm512_mask_storeu_ps(y + ow, m, best);
    _mm512_mask_storeu_epi32(idx + ow, m, _mm512_add_epi32(at, k));
  }
#elif defined(__AVX2__)
  // 8 outputs a round (the last masked): each row's 16 floats split into
  // the even and odd columns (shuffle, then the 64-bit pairs put in order).
  const __m256i iota = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
  const __m256i two = _mm256_add_epi32(iota, iota);
  auto split = [](__m256 lo, __m256 hi, __m256& even, __m256& odd) {
    even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xD8));
    odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xDD)), 0xD8));
  };
  auto wins = [](__m256 v, __m256 best) {
    return _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  };
  auto pick = [](__m256i a, __m256i b, __m256 t) {
    return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b), t));
  };
  for (; ow < OW; ow += 8) {
    const int32_t n = static_cast<int32_t>(std::min<int64_t>(8, OW - ow));
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), iota);
    const __m256i m_lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(2 * n), iota);
    const __m256i m_hi = _mm256_cmpgt_epi32(_mm256_set1_epi32(2 * n - 8), iota);
    const float* p0 = r0 + 2 * ow;
    const float* p1 = r1 + 2 * ow;
    __m256 a, b, c, d;
    split(_mm256_maskload_ps(p0, m_lo), _mm256_maskload_ps(p0 + 8, m_hi), a, b);
    split(_mm256_maskload_ps(p1, m_lo), _mm256_maskload_ps(p1 + 8, m_hi), c, d);
    __m256 best = a;
    __m256i k = _mm256_setzero_si256();
    __m256 t = wins(b, best);
    best = _mm256_blendv_ps(best, b, t);
    k = pick(k, _mm256_set1_epi32(1), t);
    t = wins(c, best);
    best = _mm256_blendv_ps(best, c, t);
    k = pick(k, _mm256_set1_epi32(w), t);
    t = wins(d, best);
    best = _mm256_blendv_ps(best, d, t);
    k = pick(k, _mm256_set1_epi32(w + 1), t);
    const __m256i at = _mm256_add_epi32(_mm256_set1_epi32(base + 2 * static_cast<int32_t>(ow)), two);
    _mm256_maskstore_ps(y + ow, m, best);
    _mm256_maskstore_epi32(idx + ow, m, _mm256_add_epi32(at, k));
  }
#endif
  for (; ow < OW; ++ow) {
    const float a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
    const bool tb = (b > a) | (b != b);
    float best = tb ? b : a;
    int32_t k = tb ? 1 : 0;
    const bool tc = (c > best) | (c != c);
    best = tc ? c : best;
    k = tc ? w : k;
    const bool td = (d > best) | (d != d);
    best = td ? d : best;
    k = td ? w + 1 : k;
    y[ow] = best;
    idx[ow] = base + 2 * static_cast<int32_t>(ow) + k;
  }
}

// Its backward: dx rows r0, r1 from one row of dy and idx.
void unpool_row(const float* __restrict dy, const int32_t* __restrict idx, float* __restrict r0, float* __restrict r1,
                int64_t OW, int32_t w, int32_t base) {
  int64_t ow = 0;
#if defined(__AVX512F__)
  // 16 outputs a round (the last masked), each corner's value interleaved
  // back into 32 floats of its row.
  const __m512i lo_ix = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i hi_ix = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  const __m512i two = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512 zero = _mm512_setzero_ps();
  for (; ow < OW; ow += 16) {
    const int64_t n = std::min<int64_t>(16, OW - ow);
    const __mmask16 m = static_cast<__mmask16>((1u << n) - 1u);
    const __mmask16 m_lo = static_cast<__mmask16>(n >= 8 ? 0xffff : (1u << (2 * n)) - 1u);
    const __mmask16 m_hi = static_cast<__mmask16>(n > 8 ? (1u << (2 * (n - 8))) - 1u : 0);
    const __m512 g = _mm512_maskz_loadu_ps(m, dy + ow);
    const __m512i at = _mm512_add_epi32(_mm512_set1_epi32(base + 2 * static_cast<int32_t>(ow)), two);
    const __m512i k = _mm512_sub_epi32(_mm512_maskz_loadu_epi32(m, idx + ow), at);
    auto corner = [&](int32_t v) { return _mm512_mask_mov_ps(zero, _mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(v)), g); };
    const __m512 a = corner(0), b = corner(1), c = corner(w), d = corner(w + 1);
    _mm512_mask_storeu_ps(r0 + 2 * ow, m_lo, _mm512_permutex2var_ps(a, lo_ix, b));
    _mm512_mask_storeu_ps(r0 + 2 * ow + 16, m_hi, _mm512_permutex2var_ps(a, hi_ix, b));
    _mm512_mask_storeu_ps(r1 + 2 * ow, m_lo, _mm512_permutex2var_ps(c, lo_ix, d));
    _mm512_mask_storeu_ps(r1 + 2 * ow + 16, m_hi, _mm512_permutex2var_ps(c, hi_ix, d));
  }
#elif defined(__AVX2__)
  // 8 outputs a round (the last masked), interleaved back by unpack and
  // 128-bit lane moves.
  const __m256i iota = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
  const __m256i two = _mm256_add_epi32(iota, iota);
  for (; ow < OW; ow += 8) {
    const int32_t n = static_cast<int32_t>(std::min<int64_t>(8, OW - ow));
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), iota);
    const __m256i m_lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(2 * n), iota);
    const __m256i m_hi = _mm256_cmpgt_epi32(_mm256_set1_epi32(2 * n - 8), iota);
    const __m256 g = _mm256_maskload_ps(dy + ow, m);
    const __m256i at = _mm256_add_epi32(_mm256_set1_epi32(base + 2 * static_cast<int32_t>(ow)), two);
    const __m256i k = _mm256_sub_epi32(_mm256_maskload_epi32(idx + ow, m), at);
    auto corner = [&](int32_t v) {
      return _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(k, _mm256_set1_epi32(v))), g);
    };
    auto put = [&](float* r, __m256 e, __m256 o) {
      const __m256 lo = _mm256_unpacklo_ps(e, o), hi = _mm256_unpackhi_ps(e, o);
      _mm256_maskstore_ps(r, m_lo, _mm256_permute2f128_ps(lo, hi, 0x20));
      _mm256_maskstore_ps(r + 8, m_hi, _mm256_permute2f128_ps(lo, hi, 0x31));
    };
    put(r0 + 2 * ow, corner(0), corner(1));
    put(r1 + 2 * ow, corner(w), corner(w + 1));
  }
#endif
  for (; ow < OW; ++ow) {
    const int32_t k = idx[ow] - base - 2 * static_cast<int32_t>(ow);
    const float g = dy[ow];
    r0[2 * ow] = k == 0 ? g : 0.0f;
    r0[2 * ow + 1] = k == 1 ? g : 0.0f;
    r1[2 * ow] = k == w ? g : 0.0f;
    r1[2 * ow + 1] = k == w + 1 ? g : 0.0f;
  }
}

// in: x  out: y, idx
class MaxPool2x2 final : public Kernel {
 public:
  explicit MaxPool2x2(const PoolParams& p) : p_(p) {}
  const char* name() const override { return "cpu.max_pool2x2"; }
  void run(const StepContext&) override {
    const float* x = in<float>(0);
    float* y = out<float>(0);
    int32_t* idx = out<int32_t>(1);
    const int64_t H = p_.H, W = p_.W, OH = p_.OH, OW = p_.OW;
    const int32_t w = static_cast<int32_t>(W);
    parallel_for(p_.N * p_.C, p_.N * p_.C * H * W, [&](int64_t nc) {
      const float* xp = x + nc * H * W;
      for (int64_t oh = 0; oh < OH; ++oh) {
        const float* r0 = xp + 2 * oh * W;
        const float* r1 = r0 + W;
        float* yr = y + (nc * OH + oh) * OW;
        int32_t* ir = idx + (nc * OH + oh) * OW;
        pool_row(r0, r1, yr, ir, OW, w, static_cast<int32_t>(2 * oh) * w);
      }
    });
  }

 private:
  PoolParams p_;
};

// in: dy, idx  out: dx
class MaxPool2x2Bwd final : public Kernel {
 public:
  explicit MaxPool2x2Bwd(const PoolParams& p) : p_(p) {}
  const char* name() const override { return "cpu.max_pool2x2_bwd"; }
  void run(const StepContext&) override {
    const float* dy = in<float>(0);
    const int32_t* idx = in<int32_t>(1);
    float* dx = out<float>(0);
    const int64_t H = p_.H, W = p_.W, OH = p_.OH, OW = p_.OW;
    const int32_t w = static_cast<int32_t>(W);
    parallel_for(p_.N * p_.C, p_.N * p_.C * H * W, [&](int64_t nc) {
      float* dp = dx + nc * H * W;
      for (int64_t oh = 0; oh < OH; ++oh) {
        float* r0 = dp + 2 * oh * W;
        float* r1 = r0 + W;
        const float* gr = dy + (nc * OH + oh) * OW;
        const int32_t* ir = idx + (nc * OH + oh) * OW;
        unpool_row(gr, ir, r0, r1, OW, w, static_cast<int32_t>(2 * oh) * w);
        if (W & 1) r0[W - 1] = r1[W - 1] = 0.0f;
      }
      if (H & 1) std::fill_n(dp + (H - 1) * W, W, 0.0f);
    });
  }

 private:
  PoolParams p_;
};

template <class K>
std::unique_ptr<Kernel> try_pool(const PoolParams& p, algorithm alg, ElemType act) {
  try {
    return std::make_unique<K>(p, alg, act);
  } catch (const dnnl::error&) {
    return nullptr;
  } catch (const Unsupported&) {
    return nullptr;
  }
}

}  // namespace

std::unique_ptr<Kernel> make_max_pool2d(const PoolParams& p, ElemType act) {
  if (own_max_pool2x2(p, act)) return std::make_unique<MaxPool2x2>(p);
  return try_pool<PoolFwd>(p, algorithm::pooling_max, act);
}
std::unique_ptr<Kernel> make_max_pool2d_bwd(const PoolParams& p, ElemType act) {
  if (own_max_pool2x2(p, act)) return std::make_unique<MaxPool2x2Bwd>(p);
  return try_pool<PoolBwd>(p, algorithm::pooling_max, act);
}
std::unique_ptr<Kernel> make_avg_pool2d(const PoolParams& p, ElemType act) {
  return try_pool<PoolFwd>(p, avg_alg(p), act);
}
std::unique_ptr<Kernel> make_avg_pool2d_bwd(const PoolParams& p, ElemType act) {
  return try_pool<PoolBwd>(p, avg_alg(p), act);
}
std::unique_ptr<Kernel> make_global_avg_pool(const GlobalPoolParams& p, Layout x, ElemType act) {
  if (x == Layout::Blocked16 && p.C % kChannelBlock) return nullptr;
  return simd::make_for<GlobalAvgPool>(act, p, x);
}
std::unique_ptr<Kernel> make_global_avg_pool_bwd(const GlobalPoolParams& p, Layout dx, ElemType act) {
  if (dx == Layout::Blocked16 && p.C % kChannelBlock) return nullptr;
  return simd::make_for<GlobalAvgPoolBwd>(act, p, dx);
}

}  // namespace memfit::kernels::cpu
