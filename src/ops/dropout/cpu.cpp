// n elements. Element i is kept iff uniform01(key, i) >= float(p), key =
// stream_key(seed, stream, step); kept values are scaled by 1/(1-p) computed
// in f32. The mask is a pure function of the index, so the loop splits freely
// across threads and matches the reference bitwise. y may be x's buffer and
// dx dy's.
//
// bf16 (act = BF16): y = round_bf16(x * scale) where kept, the f32 product of
// the f32 kernel rounded once; dx likewise. Sixteen elements at a time: the
// sixteen uniforms are drawn into a small array (the same scalar function as
// the f32 kernel, which the compiler vectorises), compared to p in f32 into
// a lane mask, and the mask bytes are stored with one masked byte store.
#include "ops/dropout/cpu.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>

#include "kernels/cpu/bf16_simd.hpp"
#include "kernels/cpu/parallel.hpp"
#include "memfit/rng.hpp"

namespace memfit::kernels::cpu {
namespace {

#if !defined(__AVX512F__)
constexpr int64_t kBlock = 64;
#endif

// in: x  out: y, mask (u8)
class Dropout final : public Kernel {
 public:
  explicit Dropout(const DropoutParams& p) : p_(p) {}
  const char* name() const override { return "cpu.dropout"; }
  void run(const StepContext& ctx) override {
    const float* x = in<float>(0);
    float* y = out<float>(0);
    uint8_t* mask = out<uint8_t>(1);
    // A micro-batch holds rows row0.. of the global batch: offset the element
    // index so the masks equal the whole batch's.
    const DropoutDraw draw = dropout_draw(p_, ctx.seed, ctx.step, ctx.row0);
    const uint64_t key = draw.key, base = draw.base;  // not a structured binding: clang 14 cannot capture one in a lambda
    const float pf = static_cast<float>(p_.p);
    const float scale = 1.0f / (1.0f - pf);
    const int64_t n = p_.n;
#if defined(__AVX512F__)
    parallel_for_simd(n, [&](int64_t i) {
      const bool keep = rng::uniform01(key, base + static_cast<uint64_t>(i)) >= pf;
      const float v = x[i] * scale;  // unconditional: the loop vectorises
      mask[i] = keep ? 1 : 0;
      y[i] = keep ? v : 0.0f;
    });
#else
    // Without AVX-512's masked stores GCC vectorises none of the loop above
    // (a float selection beside a byte store; 6 ns an element): blocks of
    // kBlock draws, then their keep masks as integers, then the values
    // and mask bytes by bit operations (1.35 ns an element), the same bits.
    parallel_for((n + kBlock - 1) / kBlock, n, [&](int64_t blk) {
      const int64_t i0 = blk * kBlock, m = std::min<int64_t>(kBlock, n - i0);
      float u[kBlock];
      int32_t k[kBlock];
#pragma omp simd
      for (int64_t j = 0; j < m; ++j) u[j] = rng::uniform01(key, base + static_cast<uint64_t>(i0 + j));
#pragma omp simd
      for (int64_t j = 0; j < m; ++j) k[j] = -static_cast<int32_t>(u[j] >= pf);
#pragma omp simd
      for (int64_t j = 0; j < m; ++j) {
        const float v = x[i0 + j] * scale;
        y[i0 + j] = std::bit_cast<float>(std::bit_cast<int32_t>(v) & k[j]);
        mask[i0 + j] = static_cast<uint8_t>(k[j] & 1);
      }
    });
#endif
  }

 private:
  DropoutParams p_;
};

// in: dy, mask  out: dx
class DropoutBwd final : public Kernel {
 public:
  explicit DropoutBwd(const DropoutParams& p) : p_(p) {}
  const char* name() const override { return "cpu.dropout_bwd"; }
  void run(const StepContext&) override {
    const float* dy = in<float>(0);
    const uint8_t* mask = in<uint8_t>(1);
    float* dx = out<float>(0);
    const float scale = 1.0f / (1.0f - static_cast<float>(p_.p));
    const int64_t n = p_.n;
    // The mask byte widened to an all-ones or zero word: the loop
    // vectorises with AVX2 too (a float selection on a byte does not).
    parallel_for_simd(n, [&](int64_t i) {
      const float g = dy[i] * scale;
      dx[i] = std::bit_cast<float>(std::bit_cast<int32_t>(g) & -static_cast<int32_t>(mask[i] != 0));
    });
  }

 private:
  DropoutParams p_;
};

#if MEMFIT_BF16_SIMD

// in: x (bf16)  out: y (bf16), mask (u8)
class DropoutBf16 final : public Kernel {
 public:
  explicit DropoutBf16(const DropoutParams& p) : p_(p) {}
  const char* name() const override { return "cpu.dropout.bf16"; }
  void run(const StepContext& ctx) override {
    const bf16_t* x = in<bf16_t>(0);
    bf16_t* y = out<bf16_t>(0);
    uint8_t* mask = out<uint8_t>(1);
    const DropoutDraw draw = dropout_draw(p_, ctx.seed, ctx.step, ctx.row0);
    const uint64_t key = draw.key, base = draw.base;  // not a structured binding: clang 14 cannot capture one in a lambda
    const float pf = static_cast<float>(p_.p);
    const __m512 scale = _mm512_set1_ps(1.0f / (1.0f - pf)), vp = _mm512_set1_ps(pf);
    const __m128i one = _mm_set1_epi8(1);
    simd::for_lanes(p_.n, [&](int64_t i, __mmask16 m) {
      alignas(64) float u[simd::kLanes];
      const uint64_t b = base + static_cast<uint64_t>(i);
#pragma omp simd
      for (int64_t j = 0; j < simd::kLanes; ++j) u[j] = rng::uniform01(key, b + static_cast<uint64_t>(j));
      const __mmask16 keep = _mm512_cmp_ps_mask(_mm512_load_ps(u), vp, _CMP_GE_OQ);
      const __m512 v = _mm512_maskz_mul_ps(keep, simd::load(x + i, m), scale);
      _mm_mask_storeu_epi8(mask + i, m, _mm_maskz_mov_epi8(keep, one));
      simd::store(y + i, v, m);
    });
  }

 private:
  DropoutParams p_;
};

// in: dy (bf16), mask  out: dx (bf16)
class DropoutBwdBf16 final : public Kernel {
 public:
  explicit DropoutBwdBf16(const DropoutParams& p) : p_(p) {}
  const char* name() const override { return "cpu.dropout_bwd.bf16"; }
  void run(const StepContext&) override {
    const bf16_t* dy = in<bf16_t>(0);
    const uint8_t* mask = in<uint8_t>(1);
    bf16_t* dx = out<bf16_t>(0);
    const __m512 scale = _mm512_set1_ps(1.0f / (1.0f - static_cast<float>(p_.p)));
    simd::for_lanes(p_.n, [&](int64_t i, __mmask16 m) {
      const __mmask16 keep = _mm_test_epi8_mask(_mm_maskz_loadu_epi8(m, mask + i), _mm_set1_epi8(-1));
      simd::store(dx + i, _mm512_maskz_mul_ps(keep, simd::load(dy + i, m), scale), m);
    });
  }

 private:
  DropoutParams p_;
};

#endif

}  // namespace

std::unique_ptr<Kernel> make_dropout(const DropoutParams& p, ElemType act) {
#if MEMFIT_BF16_SIMD
  if (act == ElemType::BF16) return std::make_unique<DropoutBf16>(p);
#endif
  return act == ElemType::F32 ? std::make_unique<Dropout>(p) : nullptr;
}
std::unique_ptr<Kernel> make_dropout_bwd(const DropoutParams& p, ElemType act) {
#if MEMFIT_BF16_SIMD
  if (act == ElemType::BF16) return std::make_unique<DropoutBwdBf16>(p);
#endif
  return act == ElemType::F32 ? std::make_unique<DropoutBwd>(p) : nullptr;
}

}  // namespace memfit::kernels::cpu
