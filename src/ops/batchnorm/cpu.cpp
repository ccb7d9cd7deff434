// N batch, C channels, HW spatial elements per channel (1 for [N, C] input);
// channel c holds N rows of HW contiguous values, n = N*HW per channel.
//
// Hand-written rather than oneDNN: oneDNN 2.6 has no JIT batch normalization
// for plain NCHW data (its ncsp implementation took 5-10x longer than these
// loops on ResNet-18 shapes, a quarter of the whole training step). The
// threads split the channels; each channel is read once from memory and its
// further passes hit the cache (a channel is n*4 bytes: 200 KiB for
// 64 x 28 x 28).
//
// Sums run in f32 along a row (vectorised) and in double across rows, and the
// variance is the mean of squared deviations from the mean (two passes), so
// the statistics lose no precision to cancellation.
//
// Blocked16 data (nChw16c) is handled sixteen channels at a time: each
// (n, channel block) is a contiguous [HW][16] tile, and the sixteen channels
// are the vector lanes. Rows are then chunks of at most kRow positions.
//
// Training: normalises with the batch statistics, writes them (mean, biased
// variance) to the mean/var outputs and updates the running statistics in
// double (rm = (1-m) rm + m mean, rv = (1-m) rv + m var n/(n-1)) unless the
// node is a recomputation. Eval: normalises with the running statistics and
// copies them to mean/var.
//
// One kernel template serves both activation storage types (act = F32 or
// BF16: x, y, dy, dx; kernels/cpu/bf16_simd.hpp's loads and stores, bf16
// read exactly into f32 lanes and each output rounded once); the statistics,
// gamma/beta and their gradients are f32 for both, and so is the arithmetic:
// f32 sums along a row (plain) or over kRow positions (blocked), double
// across them, the same two-pass variance and the same double coefficients.
// Only a plain row's f32 sum differs by storage type, in its order (see
// "Plain rows" below).
#include "ops/batchnorm/cpu.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cpu/bf16_simd.hpp"
#include "kernels/cpu/layout.hpp"
#include "kernels/cpu/parallel.hpp"

namespace memfit::kernels::cpu {
namespace {

using simd::V;

constexpr int64_t B16 = kChannelBlock;
constexpr int64_t kRow = 64;  // blocked: positions summed in f32 before a flush to double

// ---- Per channel, shared by both layouts and storage types ----

// y = (x - mf) a + b.
struct Affine {
  float mf, a, b;
};

// One channel's statistics and normalisation. Training: mean (= sum x / n)
// and the biased variance from ss = sum (x - mf)^2, the deviations from the
// f32 mean mf, corrected to the exact one: sum (x - m)^2 = sum (x - mf)^2 -
// n (m - mf)^2; the running statistics are updated unless the node is a
// recomputation. Eval: the running statistics. Writes mean_out/var_out.
Affine normalisation(const BatchNormParams& p, double n, double mean, double ss, float gamma, float beta, float& rm,
                     float& rv, float& mean_out, float& var_out) {
  double var;
  if (p.training) {
    const double dev = mean - static_cast<double>(static_cast<float>(mean));
    var = std::max(0.0, ss / n - dev * dev);
    if (p.update_stats) {
      const double m = p.momentum;
      rm = static_cast<float>((1.0 - m) * static_cast<double>(rm) + m * mean);
      rv = static_cast<float>((1.0 - m) * static_cast<double>(rv) + m * var * n / (n - 1.0));
    }
  } else {
    mean = static_cast<double>(rm);
    var = static_cast<double>(rv);
  }
  mean_out = static_cast<float>(mean);
  var_out = static_cast<float>(var);
  return {static_cast<float>(mean), static_cast<float>(static_cast<double>(gamma) / std::sqrt(var + p.eps)), beta};
}

// dx = a dy + (b (x - mean) + k).
struct InputGrad {
  float a, b, k;
};

// One channel's gradients from sdy = sum dy and sdyx = sum dy (x - mean).
// With xhat = (x - mean) istd, istd = 1/sqrt(var + eps):
//   dbeta = sum dy, dgamma = sum dy xhat,
//   training: dx = gamma istd (dy - dbeta/n - xhat dgamma/n)
//   eval:     dx = gamma istd dy.
InputGrad gradients(const BatchNormParams& p, double n, double sdy, double sdyx, float gamma, float var, float& dgamma,
                    float& dbeta) {
  const double istd = 1.0 / std::sqrt(static_cast<double>(var) + p.eps);
  sdyx *= istd;  // sum dy xhat
  dbeta = static_cast<float>(sdy);
  dgamma = static_cast<float>(sdyx);
  const double gs = static_cast<double>(gamma) * istd;
  return {static_cast<float>(gs), p.training ? static_cast<float>(-gs * istd * sdyx / n) : 0.0f,
          p.training ? static_cast<float>(-gs * sdy / n) : 0.0f};
}

// ---- Plain rows ----
//
// A row's f32 sum keeps, per storage type, the order its kernel always had
// (one order for both would change the results of one of them): f32 rows are
// the compiler's omp simd reductions (simd::row_sum, add_row_dsums); bf16
// rows are summed in 16-lane accumulators, the tail masked, then across the
// lanes by simd::hsum (two alternating accumulators for the forward's sums,
// one per sum for the backward's). The forward's terms are written once, as
// generic lambdas of a float or a V.

#if MEMFIT_BF16_SIMD
// Sum over [0, len) of the f32 lanes term(i, mask) (16 positions from i; the
// lanes past len are left out), in two accumulators.
template <class F>
inline V sum_row(int64_t len, F&& term) {
  constexpr int64_t L = simd::kLanes;
  V a0 = simd::zero(), a1 = simd::zero();
  int64_t i = 0;
  for (; i + 2 * L <= len; i += 2 * L) {
    a0 = _mm512_add_ps(a0, term(i, simd::Mask(0xffff)));
    a1 = _mm512_add_ps(a1, term(i + L, simd::Mask(0xffff)));
  }
  for (; i < len; i += L) {
    const simd::Mask m = simd::lanes(len - i);
    a0 = _mm512_mask_add_ps(a0, m, a0, term(i, m));
  }
  return _mm512_add_ps(a0, a1);
}

template <class F>
float row_sum(const bf16_t* r, int64_t len, F&& term) {
  return simd::hsum(sum_row(len, [&](int64_t i, simd::Mask k) { return term(simd::load(r + i, k)); }));
}
#endif
using simd::row_sum;

// s1 += sum dy, s2 += sum dy (x - mf) over a row, in double.
inline void add_row_dsums(const float* x, const float* g, int64_t len, float mf, double& s1, double& s2) {
  float a = 0.0f, b = 0.0f;
#pragma omp simd reduction(+ : a, b)
  for (int64_t i = 0; i < len; ++i) {
    a += g[i];
    b += g[i] * (x[i] - mf);
  }
  s1 += static_cast<double>(a);
  s2 += static_cast<double>(b);
}
#if MEMFIT_BF16_SIMD
inline void add_row_dsums(const bf16_t* x, const bf16_t* g, int64_t len, float mf, double& s1, double& s2) {
  const V vm = simd::set1(mf);
  V a = simd::zero(), b = simd::zero();
  for (int64_t i = 0; i < len; i += simd::kLanes) {
    const simd::Mask k = simd::lanes(len - i);
    const V gv = simd::load(g + i, k);  // masked lanes are 0: they add nothing
    a = _mm512_add_ps(a, gv);
    b = simd::fmadd(gv, simd::load(x + i, k) - vm, b);
  }
  s1 += static_cast<double>(simd::hsum(a));
  s2 += static_cast<double>(simd::hsum(b));
}
#endif

// ---- Blocked tiles ----

// For each of the N tiles of channel block cb, calls tile(offset of the
// tile's first element); tiles are HW x 16 elements.
template <class F>
void for_tiles(int64_t N, int64_t CB, int64_t HW, int64_t cb, F&& tile) {
  for (int64_t n = 0; n < N; ++n) tile(((n * CB + cb) * HW) * B16);
}

// K sums over the block's positions: step(acc, e) adds position e's terms
// (16 lanes = the block's channels) to the f32 accumulators acc[0..K), which
// are flushed to s[k][0..16) in double every kRow positions.
template <int K, class F>
void block_sums(int64_t N, int64_t CB, int64_t HW, int64_t cb, double* const (&s)[K], F&& step) {
  for_tiles(N, CB, HW, cb, [&](int64_t o) {
    for (int64_t h0 = 0; h0 < HW; h0 += kRow) {
      const int64_t h1 = std::min(HW, h0 + kRow);
      V acc[K];
      for (int k = 0; k < K; ++k) acc[k] = simd::zero();
      for (int64_t h = h0; h < h1; ++h) step(acc, o + h * B16);
      for (int k = 0; k < K; ++k) simd::add_to_double(s[k], acc[k]);
    }
  });
}

template <class T>
constexpr bool kBf16 = std::is_same_v<T, bf16_t>;

// A run's sizes, passed by value into the loops.
struct Dims {
  int64_t N, C, HW;
  double n;  // values per channel
};

// What both kernels share (K the kernel, which derives from it): run() reads
// the buffers (K::io()) and runs K::channel(io, d, c) for each channel
// (plain) or K::block(io, d, cb) for each block of sixteen channels
// (Blocked16), on the threads. Both are out of line: one compiled copy
// serves the serial and the threaded loop, so the results cannot depend on
// the thread count, and the loops are not squeezed into run()'s registers.
// They take the buffers and sizes by value, so that the loops keep them in
// registers (a vector store may alias any memory).
template <class K>
class BatchNormKernel : public Kernel {
 public:
  BatchNormKernel(const BatchNormParams& p, Layout l) : p_(p), blocked_(l == Layout::Blocked16) {}
  void run(const StepContext&) override {
    K& k = static_cast<K&>(*this);
    const auto io = k.io();
    const Dims d{p_.N, p_.C, p_.HW, static_cast<double>(p_.N * p_.HW)};
    const int64_t work = d.N * d.C * d.HW;
    if (blocked_) return parallel_for(d.C / B16, work, [&](int64_t cb) { k.block(io, d, cb); });
    parallel_for(d.C, work, [&](int64_t c) { k.channel(io, d, c); });
  }

 protected:
  BatchNormParams p_;
  bool blocked_;
};

// in: x, gamma, beta, running_mean, running_var  out: y, mean, var
template <class T>
class BatchNormFwd final : public BatchNormKernel<BatchNormFwd<T>> {
  using Base = BatchNormKernel<BatchNormFwd<T>>;
  friend Base;
  using Base::p_;

 public:
  using Base::Base;
  const char* name() const override {
    if constexpr (kBf16<T>) return this->blocked_ ? "cpu.batch_norm.blk16.bf16" : "cpu.batch_norm.bf16";
    return this->blocked_ ? "cpu.batch_norm.blk16" : "cpu.batch_norm";
  }

 private:
  struct Io {
    const T* x;
    const float *gamma, *beta;
    float *rm, *rv;
    T* y;
    float *mean, *var;
  };
  Io io() const {
    return {Kernel::in<T>(0),     Kernel::in<float>(1),  Kernel::in<float>(2),  Kernel::in<float>(3),
            Kernel::in<float>(4), Kernel::out<T>(0),     Kernel::out<float>(1), Kernel::out<float>(2)};
  }

  [[gnu::noinline]] void channel(const Io io, const Dims d, int64_t c) {
    const int64_t stride = d.C * d.HW;
    const T* xc = io.x + c * d.HW;
    T* yc = io.y + c * d.HW;
    double mean = 0.0, ss = 0.0;
    if (p_.training) {
      for (int64_t r = 0; r < d.N; ++r)
        mean += static_cast<double>(row_sum(xc + r * stride, d.HW, [](auto x) { return x; }));
      mean /= d.n;
      const float mf = static_cast<float>(mean);
      for (int64_t r = 0; r < d.N; ++r)
        ss += static_cast<double>(row_sum(xc + r * stride, d.HW, [mf](auto x) { return (x - mf) * (x - mf); }));
    }
    const Affine f =
        normalisation(p_, d.n, mean, ss, io.gamma[c], io.beta[c], io.rm[c], io.rv[c], io.mean[c], io.var[c]);
    const V vm = simd::set1(f.mf), va = simd::set1(f.a), vb = simd::set1(f.b);
    for (int64_t r = 0; r < d.N; ++r) {
      const T* xr = xc + r * stride;
      T* yr = yc + r * stride;
      simd::for_row(d.HW, [&](int64_t i, simd::Mask k) {
        simd::store(yr + i, simd::fmadd(simd::load(xr + i, k) - vm, va, vb), k);
      });
    }
  }

  // Sixteen channels at a time, the same arithmetic per lane.
  [[gnu::noinline]] void block(const Io io, const Dims d, int64_t cb) {
    const int64_t CB = d.C / B16, c0 = cb * B16;
    double mean[B16] = {}, ss[B16] = {};
    float mf[B16], a[B16], b[B16];
    if (p_.training) {
      block_sums<1>(d.N, CB, d.HW, cb, {mean}, [&](V* acc, int64_t e) { acc[0] = acc[0] + simd::load(io.x + e); });
      for (int64_t j = 0; j < B16; ++j) {
        mean[j] /= d.n;
        mf[j] = static_cast<float>(mean[j]);
      }
      const V vm = simd::load(mf);
      block_sums<1>(d.N, CB, d.HW, cb, {ss}, [&](V* acc, int64_t e) {
        const V dev = simd::load(io.x + e) - vm;
        acc[0] = simd::fmadd(dev, dev, acc[0]);
      });
    }
    for (int64_t j = 0; j < B16; ++j) {
      const int64_t c = c0 + j;
      const Affine f =
          normalisation(p_, d.n, mean[j], ss[j], io.gamma[c], io.beta[c], io.rm[c], io.rv[c], io.mean[c], io.var[c]);
      mf[j] = f.mf;
      a[j] = f.a;
      b[j] = f.b;
    }
    const V vm = simd::load(mf), va = simd::load(a), vb = simd::load(b);
    for_tiles(d.N, CB, d.HW, cb, [&](int64_t o) {
      for (int64_t h = 0; h < d.HW; ++h) {
        const int64_t e = o + h * B16;
        simd::store(io.y + e, simd::fmadd(simd::load(io.x + e) - vm, va, vb));
      }
    });
  }
};

// in: x, dy, gamma, mean, var  out: dx, dgamma, dbeta (formulas at gradients())
template <class T>
class BatchNormBwd final : public BatchNormKernel<BatchNormBwd<T>> {
  using Base = BatchNormKernel<BatchNormBwd<T>>;
  friend Base;
  using Base::p_;

 public:
  using Base::Base;
  const char* name() const override {
    if constexpr (kBf16<T>) return this->blocked_ ? "cpu.batch_norm_bwd.blk16.bf16" : "cpu.batch_norm_bwd.bf16";
    return this->blocked_ ? "cpu.batch_norm_bwd.blk16" : "cpu.batch_norm_bwd";
  }

 private:
  struct Io {
    const T *x, *dy;
    const float *gamma, *mean, *var;
    T* dx;
    float *dgamma, *dbeta;
  };
  Io io() const {
    return {Kernel::in<T>(0),     Kernel::in<T>(1),      Kernel::in<float>(2),  Kernel::in<float>(3),
            Kernel::in<float>(4), Kernel::out<T>(0),     Kernel::out<float>(1), Kernel::out<float>(2)};
  }

  [[gnu::noinline]] void channel(const Io io, const Dims d, int64_t c) {
    const int64_t stride = d.C * d.HW;
    const T* xc = io.x + c * d.HW;
    const T* gc = io.dy + c * d.HW;
    T* dc = io.dx + c * d.HW;
    const float mf = io.mean[c];
    double sdy = 0.0, sdyx = 0.0;
    for (int64_t r = 0; r < d.N; ++r) add_row_dsums(xc + r * stride, gc + r * stride, d.HW, mf, sdy, sdyx);
    const InputGrad g = gradients(p_, d.n, sdy, sdyx, io.gamma[c], io.var[c], io.dgamma[c], io.dbeta[c]);
    const V vm = simd::set1(mf), va = simd::set1(g.a), vb = simd::set1(g.b), vk = simd::set1(g.k);
    for (int64_t r = 0; r < d.N; ++r) {
      const T* xr = xc + r * stride;
      const T* gr = gc + r * stride;
      T* dr = dc + r * stride;
      simd::for_row(d.HW, [&](int64_t i, simd::Mask k) {
        const V t = simd::fmadd(vb, simd::load(xr + i, k) - vm, vk);
        simd::store(dr + i, simd::fmadd(va, simd::load(gr + i, k), t), k);
      });
    }
  }

  [[gnu::noinline]] void block(const Io io, const Dims d, int64_t cb) {
    const int64_t CB = d.C / B16, c0 = cb * B16;
    const V vm = simd::load(io.mean + c0);
    double sdy[B16] = {}, sdyx[B16] = {};
    // Both sums in one pass over the tiles.
    block_sums<2>(d.N, CB, d.HW, cb, {sdy, sdyx}, [&](V* acc, int64_t e) {
      const V g = simd::load(io.dy + e);
      acc[0] = acc[0] + g;
      acc[1] = simd::fmadd(g, simd::load(io.x + e) - vm, acc[1]);
    });
    float a[B16], b[B16], k[B16];
    for (int64_t j = 0; j < B16; ++j) {
      const int64_t c = c0 + j;
      const InputGrad g = gradients(p_, d.n, sdy[j], sdyx[j], io.gamma[c], io.var[c], io.dgamma[c], io.dbeta[c]);
      a[j] = g.a;
      b[j] = g.b;
      k[j] = g.k;
    }
    const V va = simd::load(a), vb = simd::load(b), vk = simd::load(k);
    for_tiles(d.N, CB, d.HW, cb, [&](int64_t o) {
      for (int64_t h = 0; h < d.HW; ++h) {
        const int64_t e = o + h * B16;
        const V t = simd::fmadd(vb, simd::load(io.x + e) - vm, vk);
        simd::store(io.dx + e, simd::fmadd(va, simd::load(io.dy + e), t));
      }
    });
  }
};

}  // namespace

std::unique_ptr<Kernel> make_batch_norm(const BatchNormParams& p, Layout l, ElemType act) {
  if (l == Layout::Blocked16 && p.C % kChannelBlock) return nullptr;
  return simd::make_for<BatchNormFwd>(act, p, l);
}
std::unique_ptr<Kernel> make_batch_norm_bwd(const BatchNormParams& p, Layout l, ElemType act) {
  if (l == Layout::Blocked16 && p.C % kChannelBlock) return nullptr;
  return simd::make_for<BatchNormBwd>(act, p, l);
}

}  // namespace memfit::kernels::cpu
