// Fused attention, f32, tiled (kBq queries x kBk keys).
//
// Forward, one task per (b, h, query block), dealt out in turn (taken as
// each thread frees under causal, where a block's cost grows with its index):
// for each key block that any row of the block may attend, S = q k^T (k's
// block transposed into the thread's tile so the product runs along keys),
// scaled, the key mask added as a 0/-inf bias and causal's tail set to -inf;
// then per row the online softmax: m' = max(m, max S), acc and l rescaled
// by exp(m - m'), P = exp(S - m'), l += sum P, P times the dropout factor,
// acc += P v. At the end out = acc / l, lse = m + log l. A row that met no
// attended key has l = 0: out = 0, lse = -inf.
//
// Backward, one task per (b, h), so that its dq, dk and dv (sums over keys
// and over queries) have one writer and the result is the same for any
// thread count: per key block (k and v transposed once), per query block
// that may attend it, delta = rowsum(dout out), P = exp(S - lse)
// (0 where not attended, and on rows with lse = -inf), dP = (dout v^T) f
// with f the dropout factor, dS = P (dP - delta) scale, then dv += (P f)^T
// dout, dq += dS k, dk += dS^T q.
//
// Every product is one register-blocked loop (gemm below): 4 output rows x
// up to 64 columns held in 16 vector accumulators with AVX-512 (6 rows x 16
// columns with AVX2), one broadcast of A per row and k. exp is simd::vexp (2 ulp); lse = m + log l in f32.
#include "ops/attention/cpu.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/bf16_simd.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/simd_math.hpp"

namespace memfit::kernels::cpu {
namespace {

using simd::Mask;
using simd::V;

constexpr int64_t kBq = 64, kBk = 64;
constexpr float kNinf = -std::numeric_limits<float>::infinity();

inline Mask lanes_c(int64_t n) { return simd::lanes(std::clamp<int64_t>(n, 0, 16)); }

// C[r, 0:nn] = (acc ? C : 0) + sum_k A(r, k) B[k, 0:nn] for RB rows,
// A(r, k) = a[r ar + k ak], B's row k at b + k ldb, C's row r at c + r ldc.
template <int RB, int NV>
[[gnu::always_inline]] inline void gemm_tile(int64_t K, const float* a, int64_t ar, int64_t ak, const float* b,
                                             int64_t ldb, float* c, int64_t ldc, int64_t nn, bool acc) {
  // The small loops are unrolled whole, so that the accumulators live in
  // registers (left as loops, GCC keeps cv in memory and stores it on every k).
  Mask m[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) m[v] = lanes_c(nn - 16 * v);
  V cv[RB][NV];
#pragma GCC unroll 8
  for (int r = 0; r < RB; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) cv[r][v] = acc ? simd::load(c + r * ldc + 16 * v, m[v]) : simd::zero();
  for (int64_t k = 0; k < K; ++k) {
    V bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = simd::load(b + k * ldb + 16 * v, m[v]);
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r) {
      const V av = simd::set1(a[r * ar + k * ak]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) cv[r][v] = simd::fmadd(av, bv[v], cv[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < RB; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) simd::store(c + r * ldc + 16 * v, cv[r][v], m[v]);
}

// The tile: RB rows x NV 16-lane vectors of accumulators, in registers.
// AVX-512 (32 registers): up to 4 x 4 (16 accumulators, 4 of B, one of A).
// AVX2 (16 registers, a 16-lane V in two): 6 x 1 (12 halves of accumulators,
// 2 of B, one of A); 4 x 4 there kept 32 halves in memory, and the attention
// ran at 15-27% of the machine's peak.
#if MEMFIT_BF16_SIMD
constexpr int kRows = 4, kCols = 64;
#else
constexpr int kRows = 6, kCols = 16;
#endif

// Under causal a block on the diagonal is attended only below it: its rows
// go by groups of kGroup (whole register tiles), each computing the key
// columns its last row attends, rounded up to whole vectors (cols below),
// and its products summing over those keys only. The skipped products are
// of zeros (exp of a masked score), so every sum keeps its terms and their
// order: the results are the same bits. At T 256 this skips 28% (AVX2:
// groups of 24 rows) or 37.5% (AVX-512: 16) of the work of the 4 diagonal
// blocks of a head's 10.
constexpr int64_t kGroup = 4 * kRows;

// Key columns [0, n) of block j0 that rows up to `last` may attend, n
// rounded up to whole 16-lane vectors and at most C (0: none).
int64_t group_cols(const AttentionParams& p, int64_t last, int64_t j0, int64_t C) {
  const int64_t valid = p.key_end(last) - j0;
  return valid <= 0 ? 0 : std::min(C, (valid + 15) / 16 * 16);
}

// The first of rows [0, R) of query block i0 that attends key j (R if none).
int64_t first_row(const AttentionParams& p, int64_t i0, int64_t R, int64_t j) {
  int64_t r = 0;
  while (r < R && p.key_end(i0 + r) <= j) ++r;
  return r;
}

template <int RB>
void gemm_rows(int64_t K, const float* a, int64_t ar, int64_t ak, const float* b, int64_t ldb, float* c, int64_t ldc,
               int64_t nn, bool acc) {
  if constexpr (kCols == 16) {
    return gemm_tile<RB, 1>(K, a, ar, ak, b, ldb, c, ldc, nn, acc);
  } else {
    switch ((nn + 15) / 16) {
      case 1: return gemm_tile<RB, 1>(K, a, ar, ak, b, ldb, c, ldc, nn, acc);
      case 2: return gemm_tile<RB, 2>(K, a, ar, ak, b, ldb, c, ldc, nn, acc);
      case 3: return gemm_tile<RB, 3>(K, a, ar, ak, b, ldb, c, ldc, nn, acc);
      default: return gemm_tile<RB, 4>(K, a, ar, ak, b, ldb, c, ldc, nn, acc);
    }
  }
}

// C[R, N] (+)= A(R, K) B[K, N] (layouts as gemm_tile). Each element's sum
// runs over k in order whatever the tile, so both builds give the same bits.
void gemm(int64_t R, int64_t K, int64_t N, const float* a, int64_t ar, int64_t ak, const float* b, int64_t ldb,
          float* c, int64_t ldc, bool acc) {
  for (int64_t n0 = 0; n0 < N; n0 += kCols) {
    const int64_t nn = std::min<int64_t>(kCols, N - n0);
    int64_t r0 = 0;
    for (; r0 + kRows <= R; r0 += kRows)
      gemm_rows<kRows>(K, a + r0 * ar, ar, ak, b + n0, ldb, c + r0 * ldc + n0, ldc, nn, acc);
    const float* ar0 = a + r0 * ar;
    float* cr0 = c + r0 * ldc + n0;
    switch (R - r0) {
      case 5: if constexpr (kRows > 5) gemm_rows<5>(K, ar0, ar, ak, b + n0, ldb, cr0, ldc, nn, acc); break;
      case 4: if constexpr (kRows > 4) gemm_rows<4>(K, ar0, ar, ak, b + n0, ldb, cr0, ldc, nn, acc); break;
      case 3: gemm_rows<3>(K, ar0, ar, ak, b + n0, ldb, cr0, ldc, nn, acc); break;
      case 2: gemm_rows<2>(K, ar0, ar, ak, b + n0, ldb, cr0, ldc, nn, acc); break;
      case 1: gemm_rows<1>(K, ar0, ar, ak, b + n0, ldb, cr0, ldc, nn, acc); break;
      default: break;
    }
  }
}

#if MEMFIT_BF16_SIMD
// dst[d ldd + c] = src[c lds + d] for one 16 x 16 tile, in registers:
// pairs of rows interleaved, then pairs of pairs, then 128-bit lanes twice.
// (The maskz forms with full masks are the plain instructions; the plain
// intrinsics trip GCC 12's -Wmaybe-uninitialized, as in bf16_simd.hpp.)
[[gnu::always_inline]] inline void transpose16(const float* src, int64_t lds, float* dst, int64_t ldd) {
  const __mmask16 all = 0xffff;
  const __mmask8 all8 = 0xff;
  __m512 r[16], t[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * lds);
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_ps(all, r[i], r[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_ps(all, r[i], r[i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 16; i += 4) {
    const __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]), c = _mm512_castps_pd(t[i + 2]),
                  d = _mm512_castps_pd(t[i + 3]);
    r[i] = _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(all8, a, c));
    r[i + 1] = _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(all8, a, c));
    r[i + 2] = _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(all8, b, d));
    r[i + 3] = _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(all8, b, d));
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_maskz_shuffle_f32x4(all, r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_maskz_shuffle_f32x4(all, r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_maskz_shuffle_f32x4(all, r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_maskz_shuffle_f32x4(all, r[i + 8], r[i + 12], 0xdd);
  }
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    _mm512_storeu_ps(dst + i * ldd, _mm512_maskz_shuffle_f32x4(all, t[i], t[i + 8], 0x88));
    _mm512_storeu_ps(dst + (i + 8) * ldd, _mm512_maskz_shuffle_f32x4(all, t[i], t[i + 8], 0xdd));
  }
}
#endif

// dst[d, c] = src[c, d] for c < C, d < W (src rows of W at a distance of
// lds, dst rows of kBk): whole 16 x 16 tiles in registers, the edges element
// by element.
void transpose_block(const float* src, int64_t C, int64_t W, int64_t lds, float* dst) {
  int64_t c16 = 0, d16 = 0;
#if MEMFIT_BF16_SIMD
  c16 = C / 16 * 16, d16 = W / 16 * 16;
  for (int64_t c = 0; c < c16; c += 16)
    for (int64_t d = 0; d < d16; d += 16) transpose16(src + c * lds + d, lds, dst + d * kBk + c, kBk);
#endif
  for (int64_t c = 0; c < C; ++c)
    for (int64_t d = c < c16 ? d16 : 0; d < W; ++d) dst[d * kBk + c] = src[c * lds + d];
}

// bias[c] = 0 where key j0 + c is attended by the mask, -inf where not.
void mask_bias(const AttentionParams& p, const int32_t* mask, int64_t b, int64_t j0, int64_t C, float* bias) {
  for (int64_t c = 0; c < C; ++c) bias[c] = mask && mask[b * p.S + j0 + c] == 0 ? kNinf : 0.0f;
}

// Dropout factor of (bh, i, j0 + c) for c < C into f.
void drop_factors(const AttentionParams& p, const AttentionDraw& dr, int64_t bh, int64_t i, int64_t j0, int64_t C,
                  float* f) {
  const uint64_t base = dr.base + static_cast<uint64_t>((bh * p.T + i) * p.S + j0), key = dr.key;
  const float pf = static_cast<float>(p.dropout), inv = 1.0f / (1.0f - pf);
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) f[c] = rng::uniform01(key, base + static_cast<uint64_t>(c)) >= pf ? inv : 0.0f;
}

// Scales row sr[0, C) and adds the bias; lanes at or past `valid` become -inf.
// Returns the row max.
float scale_row(float* sr, const float* bias, int64_t C, int64_t valid, float scale) {
  const V vs = simd::set1(scale), ninf = simd::set1(kNinf);
  V mx = ninf;
  for (int64_t c0 = 0; c0 < C; c0 += 16) {
    const Mask m = lanes_c(C - c0), ok = lanes_c(valid - c0);
    const V x = simd::blend(ok, simd::load(sr + c0, m) * vs + simd::load(bias + c0, m), ninf);
    simd::store(sr + c0, x, m);
    mx = simd::vmax(mx, x);
  }
  return simd::hmax(mx);
}

// Sum of the 16 lanes, pairwise in a fixed order (both builds: bf16_simd.hpp's
// hsum exists only with AVX-512).
float lane_sum(V v) {
  alignas(64) float f[16];
  simd::store(f, v);
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) f[j] += f[j + w];
  return f[0];
}

size_t align64(size_t n) { return (n + 63) / 64 * 64; }

// Runs task(t, thread) for t in [0, n) over the kernel's threads: dealt
// out in turn where the tasks cost the same, taken as each thread frees
// where they do not (each task writes only its own outputs, so the results
// do not depend on which thread ran it).
template <class F>
void run_tasks(int64_t n, int64_t work, int threads, bool uneven, F&& task) {
  if (threads > 1 && n > 1 && work >= kParallelMin) {
#pragma omp parallel num_threads(threads)
    {
      const int th = omp_get_thread_num();
      if (uneven) {
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < n; ++t) task(t, th);
      } else {
#pragma omp for schedule(static, 1)
        for (int64_t t = 0; t < n; ++t) task(t, th);
      }
    }
  } else {
    for (int64_t t = 0; t < n; ++t) task(t, 0);
  }
}

class Attention final : public Kernel {
 public:
  explicit Attention(const AttentionParams& p) : p_(p), threads_(std::max(1, omp_get_max_threads())) {
    per_thread_ = align64(sizeof(float) * static_cast<size_t>(p.D * kBk + kBq * kBk + kBq * p.Dv + 2 * kBq + 2 * kBk));
  }
  const char* name() const override { return "cpu.attention"; }
  size_t scratch_bytes() const override { return per_thread_ * static_cast<size_t>(threads_); }
  void run(const StepContext& ctx) override {
    const AttentionDraw dr = attention_draw(p_, ctx.seed, ctx.step, ctx.row0);
    const int64_t nib = (p_.T + kBq - 1) / kBq, n = p_.B * p_.H * nib;
    // Under causal a query block's cost grows with its index (1, 2, 3, 4
    // key blocks at T 256): dealt out in turn, one thread got 4 of every
    // 10 and the other 6.
    run_tasks(n, p_.B * p_.H * p_.T * p_.S, threads_, p_.causal, [&](int64_t t, int th) {
      block(t / nib, (t % nib) * kBq, dr, reinterpret_cast<float*>(static_cast<char*>(scratch_) + per_thread_ * th));
    });
  }

 private:
  void block(int64_t bh, int64_t i0, const AttentionDraw& dr, float* ws) const {
    const AttentionParams& p = p_;
    const int64_t D = p.D, Dv = p.Dv, R = std::min(kBq, p.T - i0), b = bh / p.H, h = bh % p.H;
    const RowMap qm = p.q_map(), km = p.k_map(), vm = p.v_map(), om = p.o_map();
    const float* q = in<float>(0) + qm.at(b, h, i0);
    const float* k = in<float>(p.k_input()) + km.at(b, h, 0);
    const float* v = in<float>(p.v_input()) + vm.at(b, h, 0);
    const int32_t* mask = p.mask ? in<int32_t>(p.qkv_inputs()) : nullptr;
    float* o = out<float>(0) + om.at(b, h, i0);
    float* lse = out<float>(1) + bh * p.T + i0;
    float *kt = ws, *s = kt + D * kBk, *acc = s + kBq * kBk, *m = acc + kBq * Dv, *l = m + kBq, *bias = l + kBq,
          *f = bias + kBk;
    std::fill(m, m + R, kNinf);
    std::fill(l, l + R, 0.0f);
    std::fill(acc, acc + R * Dv, 0.0f);
    const float scale = static_cast<float>(p.scale);
    const int64_t jend = p.key_end(i0 + R - 1);
    for (int64_t j0 = 0; j0 < jend; j0 += kBk) {
      const int64_t C = std::min(kBk, jend - j0);
      transpose_block(k + j0 * km.st, C, D, km.st, kt);
      mask_bias(p, mask, b, j0, C, bias);
      for (int64_t g0 = 0; g0 < R; g0 += kGroup) {
        const int64_t Rg = std::min(kGroup, R - g0), Cg = group_cols(p, i0 + g0 + Rg - 1, j0, C);
        if (Cg == 0) continue;  // no row of the group attends this block: m, l and acc stay
        gemm(Rg, D, Cg, q + g0 * qm.st, qm.st, 1, kt, kBk, s + g0 * kBk, kBk, false);
        for (int64_t r = g0; r < g0 + Rg; ++r) {
          float* sr = s + r * kBk;
          const float mx = scale_row(sr, bias, Cg, p.key_end(i0 + r) - j0, scale);
          const float mnew = std::max(m[r], mx);
          if (mnew == kNinf) {  // nothing attended yet
            std::fill(sr, sr + Cg, 0.0f);
            continue;
          }
          const float corr = m[r] == kNinf ? 0.0f : std::exp(m[r] - mnew);
          const V vm = simd::set1(mnew);
          V sum = simd::zero();
          for (int64_t c0 = 0; c0 < Cg; c0 += 16) {
            const Mask mk = lanes_c(Cg - c0);
            const V e = simd::keep(mk, simd::vexp(simd::load(sr + c0, mk) - vm));
            simd::store(sr + c0, e, mk);
            sum = sum + e;
          }
          l[r] = l[r] * corr + lane_sum(sum);
          m[r] = mnew;
          if (corr != 1.0f) {
            const V vc = simd::set1(corr);
            float* ar = acc + r * Dv;
            for (int64_t c0 = 0; c0 < Dv; c0 += 16) {
              const Mask mk = lanes_c(Dv - c0);
              simd::store(ar + c0, simd::load(ar + c0, mk) * vc, mk);
            }
          }
          if (p.dropout > 0.0) {
            drop_factors(p, dr, bh, i0 + r, j0, Cg, f);
            for (int64_t c = 0; c < Cg; ++c) sr[c] *= f[c];
          }
        }
        gemm(Rg, Cg, Dv, s + g0 * kBk, kBk, 1, v + j0 * vm.st, vm.st, acc + g0 * Dv, Dv, true);
      }
    }
    for (int64_t r = 0; r < R; ++r) {
      float* orow = o + r * om.st;
      if (l[r] == 0.0f) {
        std::fill(orow, orow + Dv, 0.0f);
        lse[r] = kNinf;
        continue;
      }
      const V inv = simd::set1(1.0f / l[r]);
      for (int64_t c0 = 0; c0 < Dv; c0 += 16) {
        const Mask mk = lanes_c(Dv - c0);
        simd::store(orow + c0, simd::load(acc + r * Dv + c0, mk) * inv, mk);
      }
      lse[r] = m[r] + std::log(l[r]);
    }
  }

  AttentionParams p_;
  int threads_;
  size_t per_thread_ = 0;
};

class AttentionBwd final : public Kernel {
 public:
  explicit AttentionBwd(const AttentionParams& p) : p_(p), threads_(std::max(1, omp_get_max_threads())) {
    per_thread_ = align64(sizeof(float) *
                          static_cast<size_t>((p.D + p.Dv) * kBk + 2 * kBq * kBk + kBq + 2 * kBk));
  }
  const char* name() const override { return "cpu.attention_bwd"; }
  size_t scratch_bytes() const override { return per_thread_ * static_cast<size_t>(threads_); }
  void run(const StepContext& ctx) override {
    const AttentionDraw dr = attention_draw(p_, ctx.seed, ctx.step, ctx.row0);
    run_tasks(p_.B * p_.H, p_.B * p_.H * p_.T * p_.S, threads_, false, [&](int64_t bh, int th) {
      head(bh, dr, reinterpret_cast<float*>(static_cast<char*>(scratch_) + per_thread_ * th));
    });
  }

 private:
  void head(int64_t bh, const AttentionDraw& dr, float* ws) const {
    const AttentionParams& p = p_;
    const int64_t D = p.D, Dv = p.Dv, S = p.S, b = bh / p.H, h = bh % p.H;
    const size_t n = p.qkv_inputs();
    // Row distances: lq for q and dq, lk for k and dk, lv, lo for out and dout.
    const RowMap qm = p.q_map(), km = p.k_map(), vm = p.v_map(), om = p.o_map();
    const int64_t lq = qm.st, lk = km.st, lv = vm.st, lo = om.st;
    const float* q = in<float>(0) + qm.at(b, h, 0);
    const float* k = in<float>(p.k_input()) + km.at(b, h, 0);
    const float* v = in<float>(p.v_input()) + vm.at(b, h, 0);
    const float* o = in<float>(n) + om.at(b, h, 0);
    const float* lse = in<float>(n + 1) + bh * p.T;
    const float* dout = in<float>(n + 2) + om.at(b, h, 0);
    const int32_t* mask = p.mask ? in<int32_t>(n + 3) : nullptr;
    float* dq = out<float>(0) + qm.at(b, h, 0);
    float* dk = out<float>(p.k_input()) + km.at(b, h, 0);
    float* dv = out<float>(p.v_input()) + vm.at(b, h, 0);
    // This head's rows only: in the bthd and packed layouts other heads'
    // tasks write the rest of each row.
    for (int64_t i = 0; i < p.T; ++i) std::fill(dq + i * lq, dq + i * lq + D, 0.0f);
    for (int64_t j = 0; j < S; ++j) {
      std::fill(dk + j * lk, dk + j * lk + D, 0.0f);
      std::fill(dv + j * lv, dv + j * lv + Dv, 0.0f);
    }
    float *kt = ws, *vt = kt + D * kBk, *P = vt + Dv * kBk, *dS = P + kBq * kBk, *delta = dS + kBq * kBk,
          *bias = delta + kBq, *f = bias + kBk;
    const float scale = static_cast<float>(p.scale);
    const V vscale = simd::set1(scale);
    // Key blocks outer, so each block of k and v is transposed once; the
    // query blocks that may attend it inner (under causal, queries i with
    // key_end(i) > j0, i.e. i >= j0 - (S - T)). delta is recomputed per
    // pair of blocks (R Dv multiply-adds, against R C (D + Dv) for S and dP).
    for (int64_t j0 = 0; j0 < S; j0 += kBk) {
      const int64_t C = std::min(kBk, S - j0);
      const int64_t ifirst = p.causal ? std::max<int64_t>(0, j0 - (S - p.T)) : 0;
      if (ifirst >= p.T) break;  // every later key block starts later still
      transpose_block(k + j0 * lk, C, D, lk, kt);
      transpose_block(v + j0 * lv, C, Dv, lv, vt);
      mask_bias(p, mask, b, j0, C, bias);
      for (int64_t i0 = ifirst / kBq * kBq; i0 < p.T; i0 += kBq) {
        const int64_t R = std::min(kBq, p.T - i0);
        for (int64_t r = 0; r < R; ++r) {
          const float *dr_ = dout + (i0 + r) * lo, *or_ = o + (i0 + r) * lo;
          V acc = simd::zero();
          for (int64_t c0 = 0; c0 < Dv; c0 += 16) {
            const Mask mk = lanes_c(Dv - c0);
            acc = simd::fmadd(simd::load(dr_ + c0, mk), simd::load(or_ + c0, mk), acc);
          }
          delta[r] = lane_sum(acc);
        }
        // P and dS by row groups (kGroup): a group's keys past what its
        // last row attends are zeros, written as such for the products by keys.
        for (int64_t g0 = 0; g0 < R; g0 += kGroup) {
          const int64_t Rg = std::min(kGroup, R - g0), Cg = group_cols(p, i0 + g0 + Rg - 1, j0, C);
          if (Cg > 0) {
            gemm(Rg, D, Cg, q + (i0 + g0) * lq, lq, 1, kt, kBk, P + g0 * kBk, kBk, false);
            gemm(Rg, Dv, Cg, dout + (i0 + g0) * lo, lo, 1, vt, kBk, dS + g0 * kBk, kBk, false);
          }
          for (int64_t r = g0; r < g0 + Rg; ++r) {
            float *pr = P + r * kBk, *dr_ = dS + r * kBk;
            std::fill(pr + Cg, pr + C, 0.0f);
            std::fill(dr_ + Cg, dr_ + C, 0.0f);
            const float l = lse[i0 + r];
            if (l == kNinf) {  // the row attends nothing: no gradient
              std::fill(pr, pr + Cg, 0.0f);
              std::fill(dr_, dr_ + Cg, 0.0f);
              continue;
            }
            const int64_t valid = p.key_end(i0 + r) - j0;
            const V vl = simd::set1(l), vd = simd::set1(delta[r]);
            for (int64_t c0 = 0; c0 < Cg; c0 += 16) {
              const Mask mk = lanes_c(Cg - c0), ok = lanes_c(valid - c0);
              const V x = simd::load(pr + c0, mk) * vscale + simd::load(bias + c0, mk) - vl;
              const V e = simd::keep(ok, simd::vexp(x));
              simd::store(pr + c0, e, mk);
              if (p.dropout <= 0.0) simd::store(dr_ + c0, e * (simd::load(dr_ + c0, mk) - vd) * vscale, mk);
            }
            if (p.dropout > 0.0) {
              drop_factors(p, dr, bh, i0 + r, j0, Cg, f);
              for (int64_t c = 0; c < Cg; ++c) {
                dr_[c] = pr[c] * (dr_[c] * f[c] - delta[r]) * scale;
                pr[c] *= f[c];
              }
            }
          }
          if (Cg > 0) gemm(Rg, Cg, D, dS + g0 * kBk, kBk, 1, k + j0 * lk, lk, dq + (i0 + g0) * lq, lq, true);
        }
        // dv and dk by key groups, summing over the query rows from the
        // first that attends the group's first key (the rows before it
        // hold zeros for all of the group's keys).
        for (int64_t c0 = 0; c0 < C; c0 += kGroup) {
          const int64_t Cc = std::min(kGroup, C - c0), rf = first_row(p, i0, R, j0 + c0);
          if (rf == R) continue;
          gemm(Cc, R - rf, Dv, P + rf * kBk + c0, 1, kBk, dout + (i0 + rf) * lo, lo, dv + (j0 + c0) * lv, lv, true);
          gemm(Cc, R - rf, D, dS + rf * kBk + c0, 1, kBk, q + (i0 + rf) * lq, lq, dk + (j0 + c0) * lk, lk, true);
        }
      }
    }
  }

  AttentionParams p_;
  int threads_;
  size_t per_thread_ = 0;
};

}  // namespace

std::unique_ptr<Kernel> make_attention(const AttentionParams& p) { return std::make_unique<Attention>(p); }
std::unique_ptr<Kernel> make_attention_bwd(const AttentionParams& p) { return std::make_unique<AttentionBwd>(p); }

}  // namespace memfit::kernels::cpu
