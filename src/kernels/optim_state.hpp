// Compact optimizer state: the 8-bit block codes and the bf16 stochastic
// rounding that the reference and the fast CPU optimizer kernels share, so
// that the two store exactly the same bytes for the same f32 values.
//
// 8-bit blockwise quantisation
// ----------------------------
// A state tensor is cut into blocks of kQuantBlock elements (the last one
// may be shorter). A block keeps one f32 scale, its absmax (the largest |x|
// of the block), and one byte per element: the code of y = x / absmax,
// which lies in [-1, 1]. Decoding is the code's value times the scale:
// x' = table[code] * absmax (the kernels compute table[code] rather than
// look it up: decode_signed, decode_unsigned).
//
// The codes are small floating-point numbers normalised so that the largest
// code is exactly 1 (an element equal to the absmax comes back exactly; a
// block of equal values is stored without error). A magnitude code
// c = (e << M) | f with an E-bit exponent field e and an M-bit fraction f
// stands for
//   e > 0:  z = 2^(e - B) (1 + f / 2^M)     B = 2^E - 1 (e = B: the binade [1, 2))
//   e = 0:  z = 2^(1 - B) f / 2^M           (evenly spaced down to 0)
//   value = z / T,  T = 2 - 2^-M            (the largest z, so the top code is 1)
// Two codes, as the published 8-bit optimizers use a signed code for the
// first moment and an unsigned one for the second:
//  - Signed (Adam's first moment, SGD momentum): bit 7 is the sign, bits 0-6
//    a magnitude with E = 4, M = 3. Normal values span 16 binades, from
//    2^-14 / T = 3.3e-5 of the absmax up to it; below that 8 even steps of
//    4.1e-6 reach zero.
//  - Unsigned (Adam's second moment, >= 0): all 8 bits a magnitude with
//    E = 5, M = 3: 32 binades (down to 5.0e-10 of the absmax), as the second
//    moment holds squares (twice the binades of the gradient's spread). A
//    positive value is never stored as 0 (it takes the smallest code
//    instead): a second moment read back as 0 would turn the update into
//    m / eps, the failure that makes linear 8-bit codes diverge.
// Rounding is to the nearest code. Per element, with x the value and a the
// block's absmax, the decoded x' satisfies
//   |x - x'| <= 2^-(M+1) |x|          where |x| >= a 2^(1-B) / T (normal range: 6.25%)
//   |x - x'| <= a 2^-(B+M) / T        below it (half the even step; the unsigned
//                                      code's round-up: a 2^(1-B-M) / T)
// each up to a few f32 roundings (|x| * (1/a), z / T, table * a: < 2^-21 |x|).
// A block that is all zeros has absmax 0: every code is 0 and decodes to 0.
//
// Quantisation here is pure integer and float arithmetic without branches
// (the f32 bit pattern of z rounded to M fraction bits is the code), so the
// CPU kernels' loops vectorise; the tables are built from the same decoding.
//
// bf16 state: stochastic rounding
// -------------------------------
// bf16 moments are rounded stochastically: the dropped 16 bits of the f32
// value decide, against 16 random bits, whether it rounds up, so the stored
// value is the f32 one in expectation. Round-to-nearest would freeze the
// second moment: with beta2 = 0.999 a step changes v by 0.1% of itself when
// the gradient is small, less than half a bf16 ulp (0.2% to 0.4%), so v
// could only ever grow, never decay. The random bits are a pure function of
// (seed, step, parameter name, element) (memfit/rng.hpp), so a resumed run
// rounds exactly as the uninterrupted one did, and an update split into
// one node per parameter as one node over all of them.
//
// bf16 master weights are rounded the same way after each update, from a
// stream of their own (weight_rounding_key, the low 16 bits): an update
// smaller than half an ulp of the weight (lr 3e-4 moves a weight of 0.05 by
// 0.6% of an ulp) still moves it in expectation, where round-to-nearest
// would drop it every step.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/bf16.hpp"
#include "memfit/rng.hpp"
#include "ops/optim/params.hpp"

namespace memfit::kernels::qstate {

constexpr int64_t kQuantBlock = 2048;

inline int64_t blocks_of(int64_t n) { return (n + kQuantBlock - 1) / kQuantBlock; }

constexpr float pow2f(int e) {
  double r = 1.0;
  for (int i = 0; i < e; ++i) r *= 2.0;
  for (int i = 0; i > e; --i) r *= 0.5;
  return static_cast<float>(r);
}

// A magnitude code with E exponent and M fraction bits (see above).
template <int E, int M>
struct Minifloat {
  static constexpr int kBias = (1 << E) - 1;
  static constexpr uint32_t kMaxCode = (1u << (E + M)) - 1;
  static constexpr float kTop = 2.0f - pow2f(-M);          // T
  static constexpr float kMinNormal = pow2f(1 - kBias);    // smallest normal z
  static constexpr float kSubScale = pow2f(kBias - 1 + M); // z -> even steps below kMinNormal
  static constexpr float kSubStep = pow2f(1 - kBias - M);  // one even step in z

  // The value of code c: z (exact in f32: the fields put into an f32's bit
  // pattern, or an even step below) divided by T. The tables hold it; the
  // kernels compute it (no gather), so both are the same operations.
  // (The selection is written on bit masks: GCC leaves a float ?: here as
  // control flow and the loop scalar.)
  static constexpr float value_of(uint32_t c) {
    const uint32_t e = c >> M, f = c & ((1u << M) - 1);
    const uint32_t normal = ((e + 127u - kBias) << 23) | (f << (23 - M));
    const uint32_t sub = std::bit_cast<uint32_t>(static_cast<float>(static_cast<int32_t>(f)) * kSubStep);
    const uint32_t below = 0u - static_cast<uint32_t>(e == 0);
    return std::bit_cast<float>((sub & below) | (normal & ~below)) / kTop;
  }

  // The nearest code to y in [0, 1] (larger y saturate at the top code).
  static inline uint32_t encode(float y) {
    const float z = (y < 1.0f ? y : 1.0f) * kTop;
    const uint32_t bits = std::bit_cast<uint32_t>(z);
    // Adding half of the last kept fraction bit and dropping the rest
    // rounds to nearest; a carry moves into the exponent, as it should.
    const int32_t normal = static_cast<int32_t>((bits + (1u << (22 - M))) >> (23 - M)) -
                           static_cast<int32_t>((127u - kBias) << M);
    const int32_t sub = static_cast<int32_t>(z * kSubScale + 0.5f);
    return static_cast<uint32_t>(z < kMinNormal ? sub : normal);
  }
};

using SignedMag = Minifloat<4, 3>;
using UnsignedMag = Minifloat<5, 3>;

constexpr std::array<float, 256> make_signed_table() {
  std::array<float, 256> t{};
  for (uint32_t c = 0; c < 256; ++c) t[c] = (c & 128u ? -1.0f : 1.0f) * SignedMag::value_of(c & 127u);
  return t;
}
constexpr std::array<float, 256> make_unsigned_table() {
  std::array<float, 256> t{};
  for (uint32_t c = 0; c < 256; ++c) t[c] = UnsignedMag::value_of(c);
  return t;
}
// table[code]: the value in [-1, 1] (signed) or [0, 1] (unsigned) of a code.
inline constexpr std::array<float, 256> kSignedTable = make_signed_table();
inline constexpr std::array<float, 256> kUnsignedTable = make_unsigned_table();

// Code of x given inv = 1 / absmax of its block (0 when the absmax is 0).
inline uint8_t encode_signed(float x, float inv) {
  const uint32_t sign = (std::bit_cast<uint32_t>(x) >> 24) & 128u;
  const float y = (x < 0 ? -x : x) * inv;
  return static_cast<uint8_t>(sign | SignedMag::encode(y));
}
// x >= 0; a positive x never gets code 0.
inline uint8_t encode_unsigned(float x, float inv) {
  const uint32_t c = UnsignedMag::encode(x * inv);
  return static_cast<uint8_t>(c == 0 && x > 0 ? 1u : c);
}

// table[c], computed (vectorises without a gather).
inline float decode_signed(uint8_t c) {
  const float m = SignedMag::value_of(c & 127u);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(m) | (static_cast<uint32_t>(c & 128u) << 24));
}
inline float decode_unsigned(uint8_t c) { return UnsignedMag::value_of(c); }

// 1 / absmax, or 0 for an all-zero block.
inline float inverse_scale(float absmax) { return absmax > 0 ? 1.0f / absmax : 0.0f; }

// ---- bf16 stochastic rounding

// Key of the rounding bits of one parameter's state in one step. The
// stream is the parameter's name (rng::name_hash), not its place in the
// update node, so one node over all parameters and one node per parameter
// round alike.
inline uint64_t rounding_key(uint64_t seed, int64_t step, const std::string& param) {
  return rng::stream_key(seed, rng::name_hash(param) ^ 0x6f707473746174ull, static_cast<uint64_t>(step));  // "optstat"
}
// Key of the rounding bits of one parameter's bf16 weights in one step (bf16
// master weights): a stream of its own, apart from its state's.
inline uint64_t weight_rounding_key(uint64_t seed, int64_t step, const std::string& param) {
  return rng::stream_key(seed, rng::name_hash(param) ^ 0x77656967687473ull, static_cast<uint64_t>(step));  // "weights"
}
// Key of the rounding bits of one parameter's bf16 accumulated gradient
// after micro-batch `micro` of a step (gradient accumulation kept in bf16):
// a stream of its own per micro-batch, so a resumed run rounds as the
// uninterrupted one did. `part` numbers the additions into one accumulator
// within one micro-batch where there are several (a tied table's gradient:
// the head's product, then the embedding's rows), each a stream of its own.
inline uint64_t grad_rounding_key(uint64_t seed, int64_t step, int64_t micro, const std::string& param,
                                  uint64_t part = 0) {
  const uint64_t m = static_cast<uint64_t>(micro) * 0x9e3779b97f4a7c15ull + part * 0xc2b2ae3d27d4eb4full;
  return rng::stream_key(seed, (rng::name_hash(param) ^ 0x67726164616363ull) + m, static_cast<uint64_t>(step));  // "gradacc"
}
// 32 random bits for element i (two moments take the low and the high half).
inline uint32_t rounding_bits(uint64_t key, int64_t i) {
  const uint32_t lo = static_cast<uint32_t>(key), hi = static_cast<uint32_t>(key >> 32);
  return rng::mix32(rng::mix32(static_cast<uint32_t>(i) ^ lo) + hi);
}
// x (finite) rounded to bf16, up with probability (dropped bits) / 2^16.
inline bf16_t bf16_stochastic(float x, uint32_t r16) {
  return static_cast<bf16_t>((std::bit_cast<uint32_t>(x) + (r16 & 0xffffu)) >> 16);
}

// acc[i] = bf16(g[i]) on micro-batch 0, else bf16(acc[i] + g[i]) (the sum
// in f32), rounded stochastically with grad_rounding_key's bits, for
// i in [begin, end): the reference and the CPU kernels both run this loop
// (the CPU one over slices across its threads), so they store the same bytes.
inline void accumulate_bf16(bf16_t* acc, const float* g, int64_t begin, int64_t end, bool first, uint64_t key) {
  if (first) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) acc[i] = bf16_stochastic(g[i], rounding_bits(key, i));
  } else {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) acc[i] = bf16_stochastic(bf16_to_f32(acc[i]) + g[i], rounding_bits(key, i));
  }
}
// The same for a slice of the gradient held apart: g[0, end - begin) are
// the gradient's elements [begin, end) (a panel of a product, a table's row).
inline void accumulate_bf16_slice(bf16_t* acc, const float* g, int64_t begin, int64_t end, bool first, uint64_t key) {
  const int64_t n = end - begin;
  bf16_t* a = acc + begin;
  if (first) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) a[i] = bf16_stochastic(g[i], rounding_bits(key, begin + i));
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) a[i] = bf16_stochastic(bf16_to_f32(a[i]) + g[i], rounding_bits(key, begin + i));
  }
}

// ---- one block of one tensor's moments, in any format

// Loads and stores the moments of block b (elements [b kQuantBlock, + n)) of
// tensor t through f32 buffers st[0..moments): the update computes in f32
// whatever the storage. Moment 0 (exp_avg, momentum) is signed, moment 1
// (exp_avg_sq) unsigned. `in` is the update's input list (params.hpp's
// layout for the sizes.size() tensors). Stores only finite values (the kernels check
// first): a NaN would turn a block's absmax, and every value decoded from it,
// into NaN.
class BlockStates {
 public:
  BlockStates(const StateLayout& layout, const std::vector<int64_t>& sizes, const std::vector<void*>& in,
              size_t moments)
      : l_(layout), sizes_(sizes), in_(in), k_(sizes.size()), moments_(moments) {}

  void load(size_t t, int64_t b, int64_t n, float* const* st) const {
    const int64_t begin = b * kQuantBlock;
    for (size_t s = 0; s < moments_; ++s) {
      float* x = st[s];
      void* src = state(t, s);
      if (l_.format == StateFormat::BF16) {
        const bf16_t* h = static_cast<const bf16_t*>(src) + begin;
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) x[i] = bf16_to_f32(h[i]);
      } else if (quantised(t)) {
        const uint8_t* c = static_cast<const uint8_t*>(src) + begin;
        const float a = scales(t)[static_cast<int64_t>(s) * blocks_of(size_of(t)) + b];
        if (s == 0) {
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) x[i] = decode_signed(c[i]) * a;
        } else {
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) x[i] = decode_unsigned(c[i]) * a;
        }
      } else {
        std::memcpy(x, static_cast<const float*>(src) + begin, static_cast<size_t>(n) * sizeof(float));
      }
    }
  }

  // key: rounding_key of this parameter and step (bf16 only).
  void store(size_t t, int64_t b, int64_t n, float* const* st, uint64_t key) const {
    const int64_t begin = b * kQuantBlock;
    for (size_t s = 0; s < moments_; ++s) {
      const float* x = st[s];
      void* dst = state(t, s);
      if (l_.format == StateFormat::BF16) {
        bf16_t* h = static_cast<bf16_t*>(dst) + begin;
        const uint32_t shift = s == 0 ? 0 : 16;
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) h[i] = bf16_stochastic(x[i], rounding_bits(key, begin + i) >> shift);
      } else if (quantised(t)) {
        uint8_t* c = static_cast<uint8_t*>(dst) + begin;
        float a = 0.0f;
#pragma omp simd reduction(max : a)
        for (int64_t i = 0; i < n; ++i) a = std::max(a, x[i] < 0 ? -x[i] : x[i]);
        scales(t)[static_cast<int64_t>(s) * blocks_of(size_of(t)) + b] = a;
        const float inv = inverse_scale(a);
        if (s == 0) {
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) c[i] = encode_signed(x[i], inv);
        } else {
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) c[i] = encode_unsigned(x[i], inv);
        }
      } else {
        std::memcpy(static_cast<float*>(dst) + begin, x, static_cast<size_t>(n) * sizeof(float));
      }
    }
  }

 private:
  const StateLayout& l_;
  const std::vector<int64_t>& sizes_;
  const std::vector<void*>& in_;
  size_t k_, moments_;
  bool quantised(size_t t) const { return l_.format == StateFormat::Q8 && l_.blockwise[t]; }
  void* state(size_t t, size_t s) const { return in_[(2 + s) * k_ + t]; }
  float* scales(size_t t) const { return static_cast<float*>(in_[(2 + moments_) * k_ + t]); }
  int64_t size_of(size_t t) const { return sizes_[t]; }
};

// The error of an update that met a NaN or Inf in block [begin, end) of
// tensor `name` at `step`: the kernels refuse it rather than store it.
inline std::string nonfinite_message(const std::string& name, int64_t step, int64_t begin, int64_t end) {
  return "optimizer step " + std::to_string(step + 1) + ": the gradient or the optimizer state of '" + name +
         "' holds NaN or Inf (elements " + std::to_string(begin) + " to " + std::to_string(end) +
         "); its update was refused rather than stored, which would spread the NaN over the block. The model "
         "diverged: lower --lr or clip the gradients (--clip-grad-norm)";
}

}  // namespace memfit::kernels::qstate
