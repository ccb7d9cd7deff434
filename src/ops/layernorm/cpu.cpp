// R rows of D values; gamma, beta, dgamma, dbeta are [D], mean and rstd [R].
//
// Forward, one row at a time (rows split across threads): the mean from an
// f32-lane sum flushed to double (simd::row_sums), then the variance from
// the squared deviations from the f32 mean mf, corrected to the exact mean
// in double (sum (x - m)^2 = sum (x - mf)^2 - D (m - mf)^2): two passes, so
// nothing cancels. rstd = 1 / sqrt(var + eps) in double; y = (x - mf) rstd
// gamma + beta in f32, each element read before it is written (y may be x).
//
// Backward, one pass over x and dy: the rows fall into chunks of R/16 rows,
// at least 1 and at most 64 (a split fixed by R, whatever the thread count;
// chunks split across threads, so a short batch still uses them).
// Per row, with g = dy gamma and xhat = (x - mean) rstd: the row sums of g
// and g xhat (as in the forward), then dx = rstd g - rstd sum(g)/D - xhat
// rstd sum(g xhat)/D; and each column's dy xhat and dy are added to the
// chunk's f32 partial sums (scratch: 2 D floats per chunk, at most 64 terms
// each, as the row sums). Then dgamma and dbeta add the chunks' partial sums
// in double, in chunk order, so the result does not depend on the thread
// count. dx may be dy's buffer: a row's dy is read before its dx is written.
//
// Both storage types (act = F32 or BF16) run one template: bf16 values are
// read exactly into f32 lanes and each output rounded once
// (kernels/cpu/bf16_simd.hpp); the arithmetic is the same.
#include "ops/layernorm/cpu.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cpu/bf16_simd.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/simd_math.hpp"

namespace memfit::kernels::cpu {
namespace {

using simd::Mask;
using simd::V;

constexpr int64_t kColBlock = 64;  // backward: columns per block of the final reduction

// Backward: rows per chunk of partial parameter gradients, and chunks.
inline int64_t chunk_rows(int64_t R) { return std::clamp<int64_t>(R / 16, 1, 64); }
inline int64_t chunks(int64_t R) { return (R + chunk_rows(R) - 1) / chunk_rows(R); }

template <class T>
constexpr bool kBf16 = std::is_same_v<T, bf16_t>;

// in: x, gamma, beta  out: y, mean, rstd
template <class T>
class LayerNormFwd final : public Kernel {
 public:
  explicit LayerNormFwd(const LayerNormParams& p) : p_(p) {}
  const char* name() const override { return kBf16<T> ? "cpu.layer_norm.bf16" : "cpu.layer_norm"; }
  void run(const StepContext&) override {
    const Io io{in<T>(0), in<float>(1), in<float>(2), out<T>(0), out<float>(1), out<float>(2)};
    const LayerNormParams p = p_;
    parallel_for(p.R, p.R * p.D, [&](int64_t r) { row(io, p, r); });
  }

 private:
  struct Io {
    const T* x;
    const float *gamma, *beta;
    T* y;
    float *mean, *rstd;
  };

  // Out of line: one compiled copy serves the serial and the threaded loop.
  [[gnu::noinline]] static void row(const Io io, const LayerNormParams p, int64_t r) {
    const int64_t D = p.D;
    const T* x = io.x + r * D;
    T* y = io.y + r * D;
    const double d = static_cast<double>(D);
    const double mean = simd::row_sum_d(D, [&](int64_t i, Mask m) { return simd::load(x + i, m); }) / d;
    const float mf = static_cast<float>(mean);
    const V vm = simd::set1(mf);
    const double ss = simd::row_sum_d(D, [&](int64_t i, Mask m) {
      const V dev = simd::load(x + i, m) - vm;
      return dev * dev;
    });
    const double shift = mean - static_cast<double>(mf);
    const double var = std::max(0.0, ss / d - shift * shift);
    const float rs = static_cast<float>(1.0 / std::sqrt(var + p.eps));
    io.mean[r] = mf;
    io.rstd[r] = rs;
    const V vr = simd::set1(rs);
    simd::for_row(D, [&](int64_t i, Mask m) {
      const V xhat = (simd::load(x + i, m) - vm) * vr;
      simd::store(y + i, simd::fmadd(xhat, simd::load(io.gamma + i, m), simd::load(io.beta + i, m)), m);
    });
  }

  LayerNormParams p_;
};

// in: x, dy, gamma, mean, rstd  out: dx, dgamma, dbeta
template <class T>
class LayerNormBwd final : public Kernel {
 public:
  explicit LayerNormBwd(const LayerNormParams& p) : p_(p) {}
  const char* name() const override { return kBf16<T> ? "cpu.layer_norm_bwd.bf16" : "cpu.layer_norm_bwd"; }
  // Each chunk's f32 partial sums of dgamma and dbeta.
  size_t scratch_bytes() const override { return static_cast<size_t>(chunks(p_.R) * 2 * p_.D) * sizeof(float); }
  void run(const StepContext&) override {
    const Io io{in<T>(0),     in<T>(1),  in<float>(2),   in<float>(3),
                in<float>(4), out<T>(0), out<float>(1), out<float>(2)};
    const LayerNormParams p = p_;
    float* part = static_cast<float*>(scratch_);
    const int64_t G = chunks(p.R);
    parallel_for(G, p.R * p.D, [&](int64_t c) { chunk(io, p, c, part); });
    parallel_for((p.D + kColBlock - 1) / kColBlock, G * p.D, [&](int64_t b) { reduce(io, p, b, part); });
  }

 private:
  struct Io {
    const T *x, *dy;
    const float *gamma, *mean, *rstd;
    T* dx;
    float *dgamma, *dbeta;
  };

  // Chunk c's rows of dx, and the chunk's sums of dy xhat and dy per column
  // into part[c][0][.] and part[c][1][.].
  [[gnu::noinline]] static void chunk(const Io io, const LayerNormParams p, int64_t c, float* part) {
    const int64_t D = p.D, r0 = c * chunk_rows(p.R), r1 = std::min(p.R, r0 + chunk_rows(p.R));
    float* pg = part + c * 2 * D;
    float* pb = pg + D;
    simd::for_row(D, [&](int64_t i, Mask m) {
      simd::store(pg + i, simd::zero(), m);
      simd::store(pb + i, simd::zero(), m);
    });
    const double d = static_cast<double>(D);
    for (int64_t r = r0; r < r1; ++r) {
      const T* x = io.x + r * D;
      const T* dy = io.dy + r * D;
      const V vm = simd::set1(io.mean[r]), vr = simd::set1(io.rstd[r]);
      double s[2];  // sum g, sum g xhat
      simd::row_sums<2>(D, s, [&](int64_t i, Mask m, V* t) {
        const V e = simd::load(dy + i, m);
        const V xhat = (simd::load(x + i, m) - vm) * vr;
        simd::store(pg + i, simd::fmadd(e, xhat, simd::load(pg + i, m)), m);
        simd::store(pb + i, simd::load(pb + i, m) + e, m);
        t[0] = e * simd::load(io.gamma + i, m);
        t[1] = t[0] * xhat;
      });
      const double rs = static_cast<double>(io.rstd[r]);
      const V vb = simd::set1(static_cast<float>(-rs * s[1] / d)), vk = simd::set1(static_cast<float>(-rs * s[0] / d));
      T* dx = io.dx + r * D;  // may be dy: row r's dy has been read
      simd::for_row(D, [&](int64_t i, Mask m) {
        const V g = simd::load(dy + i, m) * simd::load(io.gamma + i, m);
        const V xhat = (simd::load(x + i, m) - vm) * vr;
        simd::store(dx + i, simd::fmadd(vr, g, simd::fmadd(vb, xhat, vk)), m);
      });
    }
  }

  // dgamma and dbeta of column block b: the chunks' partial sums, in double,
  // in chunk order.
  [[gnu::noinline]] static void reduce(const Io io, const LayerNormParams p, int64_t b, const float* part) {
    const int64_t D = p.D, j1 = std::min(D, (b + 1) * kColBlock);
    for (int64_t j = b * kColBlock; j < j1; ++j) {
      double sg = 0.0, sb = 0.0;
      for (int64_t c = 0, G = chunks(p.R); c < G; ++c) {
        sg += static_cast<double>(part[c * 2 * D + j]);
        sb += static_cast<double>(part[c * 2 * D + D + j]);
      }
      io.dgamma[j] = static_cast<float>(sg);
      io.dbeta[j] = static_cast<float>(sb);
    }
  }

  LayerNormParams p_;
};

}  // namespace

std::unique_ptr<Kernel> make_layer_norm(const LayerNormParams& p, ElemType act) {
  return simd::make_for<LayerNormFwd>(act, p);
}
std::unique_ptr<Kernel> make_layer_norm_bwd(const LayerNormParams& p, ElemType act) {
  return simd::make_for<LayerNormBwd>(act, p);
}

}  // namespace memfit::kernels::cpu
