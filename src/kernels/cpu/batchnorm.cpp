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
// bf16 activations (act = BF16): x, y, dy, dx are bf16, read exactly into
// f32 lanes and each output rounded once (kernels/cpu/bf16_simd.hpp); the
// statistics, gamma/beta and their gradients stay f32, and the arithmetic is
// the f32 kernel's: f32 sums along a row (plain) or over kRow positions
// (blocked), double across them, the same two-pass variance and the same
// double coefficients. Written with AVX-512 intrinsics, a row's tail by
// masked loads and stores.
#include "kernels/cpu/batchnorm.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/bf16_simd.hpp"
#include "kernels/cpu/layout.hpp"
#include "kernels/cpu/parallel.hpp"

namespace memfit::kernels::cpu {
namespace {

constexpr int64_t B16 = kChannelBlock;
constexpr int64_t kRow = 64;  // blocked: positions summed in f32 before a flush to double

// Per-channel sums of f(x, ...) over the N rows of HW values.
template <class F>
double channel_sum(int64_t N, int64_t stride, int64_t HW, F&& row_sum) {
  double s = 0.0;
  for (int64_t b = 0; b < N; ++b) s += static_cast<double>(row_sum(b * stride, HW));
  return s;
}

// Blocked: for each of the N tiles of channel block cb, calls
// tile(offset of the tile's first element); tiles are HW x 16 floats.
template <class F>
void for_tiles(int64_t N, int64_t CB, int64_t HW, int64_t cb, F&& tile) {
  for (int64_t n = 0; n < N; ++n) tile(((n * CB + cb) * HW) * B16);
}

// Blocked: s[j] += sum over the block's positions of term(i, j), i the
// element offset, j the lane; f32 within kRow positions, double across.
template <class T>
void block_sum(int64_t N, int64_t CB, int64_t HW, int64_t cb, double* s, T&& term) {
  for_tiles(N, CB, HW, cb, [&](int64_t o) {
    for (int64_t h0 = 0; h0 < HW; h0 += kRow) {
      const int64_t h1 = std::min(HW, h0 + kRow);
      float acc[B16] = {};
      for (int64_t h = h0; h < h1; ++h) {
#pragma omp simd
        for (int64_t j = 0; j < B16; ++j) acc[j] += term(o + h * B16 + j, j);
      }
      for (int64_t j = 0; j < B16; ++j) s[j] += static_cast<double>(acc[j]);
    }
  });
}

// in: x, gamma, beta, running_mean, running_var  out: y, mean, var
class BatchNormFwd final : public Kernel {
 public:
  BatchNormFwd(const BatchNormParams& p, Layout l) : p_(p), blocked_(l == Layout::Blocked16) {}
  const char* name() const override { return blocked_ ? "cpu.batch_norm.blk16" : "cpu.batch_norm"; }
  void run(const StepContext&) override {
    if (blocked_) return run_blocked();
    const float* x = in<float>(0);
    const float* gamma = in<float>(1);
    const float* beta = in<float>(2);
    float* rm = in<float>(3);
    float* rv = in<float>(4);
    float* y = out<float>(0);
    float* mean_out = out<float>(1);
    float* var_out = out<float>(2);
    const int64_t N = p_.N, C = p_.C, HW = p_.HW, stride = C * HW;
    const double n = static_cast<double>(N * HW), m = p_.momentum, eps = p_.eps;
    const bool training = p_.training, update = p_.update_stats;
    parallel_for(C, N * C * HW, [&](int64_t c) {
      const float* xc = x + c * HW;
      float* yc = y + c * HW;
      double mean, var;
      if (training) {
        mean = channel_sum(N, stride, HW, [&](int64_t o, int64_t len) {
                 const float* r = xc + o;
                 float s = 0.0f;
#pragma omp simd reduction(+ : s)
                 for (int64_t i = 0; i < len; ++i) s += r[i];
                 return s;
               }) / n;
        const float mf = static_cast<float>(mean);
        // Deviations from the f32 mean, corrected to the exact one:
        // sum (x - m)^2 = sum (x - mf)^2 - n (m - mf)^2.
        const double ss = channel_sum(N, stride, HW, [&](int64_t o, int64_t len) {
          const float* r = xc + o;
          float s = 0.0f;
#pragma omp simd reduction(+ : s)
          for (int64_t i = 0; i < len; ++i) s += (r[i] - mf) * (r[i] - mf);
          return s;
        });
        const double dev = mean - static_cast<double>(mf);
        var = std::max(0.0, ss / n - dev * dev);
        if (update) {
          rm[c] = static_cast<float>((1.0 - m) * static_cast<double>(rm[c]) + m * mean);
          rv[c] = static_cast<float>((1.0 - m) * static_cast<double>(rv[c]) + m * var * n / (n - 1.0));
        }
      } else {
        mean = static_cast<double>(rm[c]);
        var = static_cast<double>(rv[c]);
      }
      mean_out[c] = static_cast<float>(mean);
      var_out[c] = static_cast<float>(var);
      const float mf = static_cast<float>(mean);
      const float a = static_cast<float>(static_cast<double>(gamma[c]) / std::sqrt(var + eps));
      const float b = beta[c];
      for (int64_t r = 0; r < N; ++r) {
        const float* xr = xc + r * stride;
        float* yr = yc + r * stride;
#pragma omp simd
        for (int64_t i = 0; i < HW; ++i) yr[i] = (xr[i] - mf) * a + b;
      }
    });
  }

 private:
  // Sixteen channels at a time, the same arithmetic per lane.
  void run_blocked() {
    const float* x = in<float>(0);
    const float* gamma = in<float>(1);
    const float* beta = in<float>(2);
    float* rm = in<float>(3);
    float* rv = in<float>(4);
    float* y = out<float>(0);
    float* mean_out = out<float>(1);
    float* var_out = out<float>(2);
    const int64_t N = p_.N, C = p_.C, HW = p_.HW, CB = C / B16;
    const double n = static_cast<double>(N * HW), m = p_.momentum, eps = p_.eps;
    const bool training = p_.training, update = p_.update_stats;
    parallel_for(CB, N * C * HW, [&](int64_t cb) {
      const int64_t c0 = cb * B16;
      double mean[B16], var[B16];
      float mf[B16], a[B16], b[B16];
      if (training) {
        double s[B16] = {};
        block_sum(N, CB, HW, cb, s, [&](int64_t i, int64_t) { return x[i]; });
        for (int64_t j = 0; j < B16; ++j) {
          mean[j] = s[j] / n;
          mf[j] = static_cast<float>(mean[j]);
          s[j] = 0.0;
        }
        block_sum(N, CB, HW, cb, s, [&](int64_t i, int64_t j) { return (x[i] - mf[j]) * (x[i] - mf[j]); });
        for (int64_t j = 0; j < B16; ++j) {
          const double dev = mean[j] - static_cast<double>(mf[j]);
          var[j] = std::max(0.0, s[j] / n - dev * dev);
          if (update) {
            rm[c0 + j] = static_cast<float>((1.0 - m) * static_cast<double>(rm[c0 + j]) + m * mean[j]);
            rv[c0 + j] = static_cast<float>((1.0 - m) * static_cast<double>(rv[c0 + j]) + m * var[j] * n / (n - 1.0));
          }
        }
      } else {
        for (int64_t j = 0; j < B16; ++j) {
          mean[j] = static_cast<double>(rm[c0 + j]);
          var[j] = static_cast<double>(rv[c0 + j]);
        }
      }
      for (int64_t j = 0; j < B16; ++j) {
        mean_out[c0 + j] = static_cast<float>(mean[j]);
        var_out[c0 + j] = static_cast<float>(var[j]);
        mf[j] = static_cast<float>(mean[j]);
        a[j] = static_cast<float>(static_cast<double>(gamma[c0 + j]) / std::sqrt(var[j] + eps));
        b[j] = beta[c0 + j];
      }
      for_tiles(N, CB, HW, cb, [&](int64_t o) {
        const float* xt = x + o;
        float* yt = y + o;
        for (int64_t h = 0; h < HW; ++h) {
#pragma omp simd
          for (int64_t j = 0; j < B16; ++j) yt[h * B16 + j] = (xt[h * B16 + j] - mf[j]) * a[j] + b[j];
        }
      });
    });
  }

  BatchNormParams p_;
  bool blocked_;
};

// in: x, dy, gamma, mean, var  out: dx, dgamma, dbeta
// With xhat = (x - mean) istd, istd = 1/sqrt(var + eps):
//   dbeta = sum dy, dgamma = sum dy xhat,
//   training: dx = gamma istd (dy - dbeta/n - xhat dgamma/n)
//   eval:     dx = gamma istd dy.
class BatchNormBwd final : public Kernel {
 public:
  BatchNormBwd(const BatchNormParams& p, Layout l) : p_(p), blocked_(l == Layout::Blocked16) {}
  const char* name() const override { return blocked_ ? "cpu.batch_norm_bwd.blk16" : "cpu.batch_norm_bwd"; }
  void run(const StepContext&) override {
    if (blocked_) return run_blocked();
    const float* x = in<float>(0);
    const float* dy = in<float>(1);
    const float* gamma = in<float>(2);
    const float* mean_in = in<float>(3);
    const float* var_in = in<float>(4);
    float* dx = out<float>(0);
    float* dgamma = out<float>(1);
    float* dbeta = out<float>(2);
    const int64_t N = p_.N, C = p_.C, HW = p_.HW, stride = C * HW;
    const double n = static_cast<double>(N * HW), eps = p_.eps;
    const bool training = p_.training;
    parallel_for(C, N * C * HW, [&](int64_t c) {
      const float* xc = x + c * HW;
      const float* dyc = dy + c * HW;
      float* dxc = dx + c * HW;
      const float mf = mean_in[c];
      const double istd = 1.0 / std::sqrt(static_cast<double>(var_in[c]) + eps);
      double sdy = 0.0, sdyx = 0.0;
      for (int64_t r = 0; r < N; ++r) {
        const float* xr = xc + r * stride;
        const float* gr = dyc + r * stride;
        float s1 = 0.0f, s2 = 0.0f;
#pragma omp simd reduction(+ : s1, s2)
        for (int64_t i = 0; i < HW; ++i) {
          s1 += gr[i];
          s2 += gr[i] * (xr[i] - mf);
        }
        sdy += static_cast<double>(s1);
        sdyx += static_cast<double>(s2);
      }
      sdyx *= istd;  // sum dy xhat
      dbeta[c] = static_cast<float>(sdy);
      dgamma[c] = static_cast<float>(sdyx);
      // dx = a dy + b (x - mean) + k
      const double gs = static_cast<double>(gamma[c]) * istd;
      const float a = static_cast<float>(gs);
      const float b = training ? static_cast<float>(-gs * istd * sdyx / n) : 0.0f;
      const float k = training ? static_cast<float>(-gs * sdy / n) : 0.0f;
      for (int64_t r = 0; r < N; ++r) {
        const float* xr = xc + r * stride;
        const float* gr = dyc + r * stride;
        float* dr = dxc + r * stride;
#pragma omp simd
        for (int64_t i = 0; i < HW; ++i) dr[i] = a * gr[i] + (b * (xr[i] - mf) + k);
      }
    });
  }

 private:
  void run_blocked() {
    const float* x = in<float>(0);
    const float* dy = in<float>(1);
    const float* gamma = in<float>(2);
    const float* mean_in = in<float>(3);
    const float* var_in = in<float>(4);
    float* dx = out<float>(0);
    float* dgamma = out<float>(1);
    float* dbeta = out<float>(2);
    const int64_t N = p_.N, C = p_.C, HW = p_.HW, CB = C / B16;
    const double n = static_cast<double>(N * HW), eps = p_.eps;
    const bool training = p_.training;
    parallel_for(CB, N * C * HW, [&](int64_t cb) {
      const int64_t c0 = cb * B16;
      float mf[B16], a[B16], b[B16], k[B16];
      for (int64_t j = 0; j < B16; ++j) mf[j] = mean_in[c0 + j];
      double sdy[B16] = {}, sdyx[B16] = {};
      block_sum(N, CB, HW, cb, sdy, [&](int64_t i, int64_t) { return dy[i]; });
      block_sum(N, CB, HW, cb, sdyx, [&](int64_t i, int64_t j) { return dy[i] * (x[i] - mf[j]); });
      for (int64_t j = 0; j < B16; ++j) {
        const double istd = 1.0 / std::sqrt(static_cast<double>(var_in[c0 + j]) + eps);
        const double s2 = sdyx[j] * istd;  // sum dy xhat
        dbeta[c0 + j] = static_cast<float>(sdy[j]);
        dgamma[c0 + j] = static_cast<float>(s2);
        const double gs = static_cast<double>(gamma[c0 + j]) * istd;
        a[j] = static_cast<float>(gs);
        b[j] = training ? static_cast<float>(-gs * istd * s2 / n) : 0.0f;
        k[j] = training ? static_cast<float>(-gs * sdy[j] / n) : 0.0f;
      }
      for_tiles(N, CB, HW, cb, [&](int64_t o) {
        const float* xt = x + o;
        const float* gt = dy + o;
        float* dt = dx + o;
        for (int64_t h = 0; h < HW; ++h) {
#pragma omp simd
          for (int64_t j = 0; j < B16; ++j)
            dt[h * B16 + j] = a[j] * gt[h * B16 + j] + (b[j] * (xt[h * B16 + j] - mf[j]) + k[j]);
        }
      });
    });
  }

  BatchNormParams p_;
  bool blocked_;
};

#if MEMFIT_BF16_SIMD

// Sum over [0, len) of the f32 lanes term(i, mask) (16 positions from i; the
// lanes past len are left out), in two accumulators.
template <class F>
inline __m512 sum_row(int64_t len, F&& term) {
  constexpr int64_t L = simd::kLanes;
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 2 * L <= len; i += 2 * L) {
    a0 = _mm512_add_ps(a0, term(i, __mmask16(0xffff)));
    a1 = _mm512_add_ps(a1, term(i + L, __mmask16(0xffff)));
  }
  for (; i < len; i += L) {
    const __mmask16 m = simd::lanes(len - i);
    a0 = _mm512_mask_add_ps(a0, m, a0, term(i, m));
  }
  return _mm512_add_ps(a0, a1);
}

// Blocked: s[j] += sum over the block's positions of term(offset) (16 lanes
// = the block's channels), f32 within kRow positions, double across.
template <class T>
void block_sum_bf16(int64_t N, int64_t CB, int64_t HW, int64_t cb, double* s, T&& term) {
  for_tiles(N, CB, HW, cb, [&](int64_t o) {
    for (int64_t h0 = 0; h0 < HW; h0 += kRow) {
      const int64_t h1 = std::min(HW, h0 + kRow);
      __m512 acc = _mm512_setzero_ps();
      for (int64_t h = h0; h < h1; ++h) acc = _mm512_add_ps(acc, term(o + h * B16));
      simd::add_to_double(s, acc);
    }
  });
}

inline __m512 lanes_of(const float* v) { return _mm512_loadu_ps(v); }

// in: x, gamma, beta, running_mean, running_var  out: y, mean, var (x, y bf16)
class BatchNormFwdBf16 final : public Kernel {
 public:
  BatchNormFwdBf16(const BatchNormParams& p, Layout l) : p_(p), blocked_(l == Layout::Blocked16) {}
  const char* name() const override { return blocked_ ? "cpu.batch_norm.blk16.bf16" : "cpu.batch_norm.bf16"; }
  void run(const StepContext&) override {
    if (blocked_) return run_blocked();
    const bf16_t* x = in<bf16_t>(0);
    const float* gamma = in<float>(1);
    const float* beta = in<float>(2);
    float* rm = in<float>(3);
    float* rv = in<float>(4);
    bf16_t* y = out<bf16_t>(0);
    float* mean_out = out<float>(1);
    float* var_out = out<float>(2);
    const int64_t N = p_.N, C = p_.C, HW = p_.HW, stride = C * HW;
    const double n = static_cast<double>(N * HW), m = p_.momentum, eps = p_.eps;
    const bool training = p_.training, update = p_.update_stats;
    parallel_for(C, N * C * HW, [&](int64_t c) {
      const bf16_t* xc = x + c * HW;
      bf16_t* yc = y + c * HW;
      double mean, var;
      if (training) {
        double s = 0.0;
        for (int64_t r = 0; r < N; ++r) {
          const bf16_t* xr = xc + r * stride;
          s += static_cast<double>(simd::hsum(sum_row(HW, [&](int64_t i, __mmask16 k) { return simd::load(xr + i, k); })));
        }
        mean = s / n;
        const float mf = static_cast<float>(mean);
        const __m512 vm = _mm512_set1_ps(mf);
        // Deviations from the f32 mean, corrected to the exact one (as the f32 kernel).
        double ss = 0.0;
        for (int64_t r = 0; r < N; ++r) {
          const bf16_t* xr = xc + r * stride;
          ss += static_cast<double>(simd::hsum(sum_row(HW, [&](int64_t i, __mmask16 k) {
            const __m512 d = _mm512_sub_ps(simd::load(xr + i, k), vm);
            return _mm512_mul_ps(d, d);
          })));
        }
        const double dev = mean - static_cast<double>(mf);
        var = std::max(0.0, ss / n - dev * dev);
        if (update) {
          rm[c] = static_cast<float>((1.0 - m) * static_cast<double>(rm[c]) + m * mean);
          rv[c] = static_cast<float>((1.0 - m) * static_cast<double>(rv[c]) + m * var * n / (n - 1.0));
        }
      } else {
        mean = static_cast<double>(rm[c]);
        var = static_cast<double>(rv[c]);
      }
      mean_out[c] = static_cast<float>(mean);
      var_out[c] = static_cast<float>(var);
      const __m512 vm = _mm512_set1_ps(static_cast<float>(mean));
      const __m512 a = _mm512_set1_ps(static_cast<float>(static_cast<double>(gamma[c]) / std::sqrt(var + eps)));
      const __m512 b = _mm512_set1_ps(beta[c]);
      for (int64_t r = 0; r < N; ++r) {
        const bf16_t* xr = xc + r * stride;
        bf16_t* yr = yc + r * stride;
        for (int64_t i = 0; i < HW; i += simd::kLanes) {
          const __mmask16 k = simd::lanes(HW - i);
          simd::store(yr + i, _mm512_fmadd_ps(_mm512_sub_ps(simd::load(xr + i, k), vm), a, b), k);
        }
      }
    });
  }

 private:
  void run_blocked() {
    const bf16_t* x = in<bf16_t>(0);
    const float* gamma = in<float>(1);
    const float* beta = in<float>(2);
    float* rm = in<float>(3);
    float* rv = in<float>(4);
    bf16_t* y = out<bf16_t>(0);
    float* mean_out = out<float>(1);
    float* var_out = out<float>(2);
    const int64_t N = p_.N, C = p_.C, HW = p_.HW, CB = C / B16;
    const double n = static_cast<double>(N * HW), m = p_.momentum, eps = p_.eps;
    const bool training = p_.training, update = p_.update_stats;
    parallel_for(CB, N * C * HW, [&](int64_t cb) {
      const int64_t c0 = cb * B16;
      double mean[B16], var[B16];
      float mf[B16], a[B16], b[B16];
      if (training) {
        double s[B16] = {};
        block_sum_bf16(N, CB, HW, cb, s, [&](int64_t o) { return simd::load(x + o); });
        for (int64_t j = 0; j < B16; ++j) {
          mean[j] = s[j] / n;
          mf[j] = static_cast<float>(mean[j]);
          s[j] = 0.0;
        }
        const __m512 vm = lanes_of(mf);
        block_sum_bf16(N, CB, HW, cb, s, [&](int64_t o) {
          const __m512 d = _mm512_sub_ps(simd::load(x + o), vm);
          return _mm512_mul_ps(d, d);
        });
        for (int64_t j = 0; j < B16; ++j) {
          const double dev = mean[j] - static_cast<double>(mf[j]);
          var[j] = std::max(0.0, s[j] / n - dev * dev);
          if (update) {
            rm[c0 + j] = static_cast<float>((1.0 - m) * static_cast<double>(rm[c0 + j]) + m * mean[j]);
            rv[c0 + j] = static_cast<float>((1.0 - m) * static_cast<double>(rv[c0 + j]) + m * var[j] * n / (n - 1.0));
          }
        }
      } else {
        for (int64_t j = 0; j < B16; ++j) {
          mean[j] = static_cast<double>(rm[c0 + j]);
          var[j] = static_cast<double>(rv[c0 + j]);
        }
      }
      for (int64_t j = 0; j < B16; ++j) {
        mean_out[c0 + j] = static_cast<float>(mean[j]);
        var_out[c0 + j] = static_cast<float>(var[j]);
        mf[j] = static_cast<float>(mean[j]);
        a[j] = static_cast<float>(static_cast<double>(gamma[c0 + j]) / std::sqrt(var[j] + eps));
        b[j] = beta[c0 + j];
      }
      const __m512 vm = lanes_of(mf), va = lanes_of(a), vb = lanes_of(b);
      for_tiles(N, CB, HW, cb, [&](int64_t o) {
        for (int64_t h = 0; h < HW; ++h) {
          const int64_t e = o + h * B16;
          simd::store(y + e, _mm512_fmadd_ps(_mm512_sub_ps(simd::load(x + e), vm), va, vb));
        }
      });
    });
  }

  BatchNormParams p_;
  bool blocked_;
};

// in: x, dy, gamma, mean, var  out: dx, dgamma, dbeta (x, dy, dx bf16); the
// f32 kernel's formulas.
class BatchNormBwdBf16 final : public Kernel {
 public:
  BatchNormBwdBf16(const BatchNormParams& p, Layout l) : p_(p), blocked_(l == Layout::Blocked16) {}
  const char* name() const override { return blocked_ ? "cpu.batch_norm_bwd.blk16.bf16" : "cpu.batch_norm_bwd.bf16"; }
  void run(const StepContext&) override {
    if (blocked_) return run_blocked();
    const bf16_t* x = in<bf16_t>(0);
    const bf16_t* dy = in<bf16_t>(1);
    const float* gamma = in<float>(2);
    const float* mean_in = in<float>(3);
    const float* var_in = in<float>(4);
    bf16_t* dx = out<bf16_t>(0);
    float* dgamma = out<float>(1);
    float* dbeta = out<float>(2);
    const int64_t N = p_.N, C = p_.C, HW = p_.HW, stride = C * HW;
    const double n = static_cast<double>(N * HW), eps = p_.eps;
    const bool training = p_.training;
    parallel_for(C, N * C * HW, [&](int64_t c) {
      const bf16_t* xc = x + c * HW;
      const bf16_t* dyc = dy + c * HW;
      bf16_t* dxc = dx + c * HW;
      const __m512 vm = _mm512_set1_ps(mean_in[c]);
      const double istd = 1.0 / std::sqrt(static_cast<double>(var_in[c]) + eps);
      double sdy = 0.0, sdyx = 0.0;
      for (int64_t r = 0; r < N; ++r) {
        const bf16_t* xr = xc + r * stride;
        const bf16_t* gr = dyc + r * stride;
        __m512 s1 = _mm512_setzero_ps(), s2 = _mm512_setzero_ps();
        for (int64_t i = 0; i < HW; i += simd::kLanes) {
          const __mmask16 k = simd::lanes(HW - i);
          const __m512 g = simd::load(gr + i, k);  // masked lanes are 0: they add nothing
          s1 = _mm512_add_ps(s1, g);
          s2 = _mm512_fmadd_ps(g, _mm512_sub_ps(simd::load(xr + i, k), vm), s2);
        }
        sdy += static_cast<double>(simd::hsum(s1));
        sdyx += static_cast<double>(simd::hsum(s2));
      }
      sdyx *= istd;  // sum dy xhat
      dbeta[c] = static_cast<float>(sdy);
      dgamma[c] = static_cast<float>(sdyx);
      // dx = a dy + b (x - mean) + k
      const double gs = static_cast<double>(gamma[c]) * istd;
      const __m512 a = _mm512_set1_ps(static_cast<float>(gs));
      const __m512 b = _mm512_set1_ps(training ? static_cast<float>(-gs * istd * sdyx / n) : 0.0f);
      const __m512 kk = _mm512_set1_ps(training ? static_cast<float>(-gs * sdy / n) : 0.0f);
      for (int64_t r = 0; r < N; ++r) {
        const bf16_t* xr = xc + r * stride;
        const bf16_t* gr = dyc + r * stride;
        bf16_t* dr = dxc + r * stride;
        for (int64_t i = 0; i < HW; i += simd::kLanes) {
          const __mmask16 k = simd::lanes(HW - i);
          const __m512 t = _mm512_fmadd_ps(b, _mm512_sub_ps(simd::load(xr + i, k), vm), kk);
          simd::store(dr + i, _mm512_fmadd_ps(a, simd::load(gr + i, k), t), k);
        }
      }
    });
  }

 private:
  void run_blocked() {
    const bf16_t* x = in<bf16_t>(0);
    const bf16_t* dy = in<bf16_t>(1);
    const float* gamma = in<float>(2);
    const float* mean_in = in<float>(3);
    const float* var_in = in<float>(4);
    bf16_t* dx = out<bf16_t>(0);
    float* dgamma = out<float>(1);
    float* dbeta = out<float>(2);
    const int64_t N = p_.N, C = p_.C, HW = p_.HW, CB = C / B16;
    const double n = static_cast<double>(N * HW), eps = p_.eps;
    const bool training = p_.training;
    parallel_for(CB, N * C * HW, [&](int64_t cb) {
      const int64_t c0 = cb * B16;
      float a[B16], b[B16], k[B16];
      const __m512 vm = lanes_of(mean_in + c0);
      double sdy[B16] = {}, sdyx[B16] = {};
      // Both sums in one pass over the tiles.
      for_tiles(N, CB, HW, cb, [&](int64_t o) {
        for (int64_t h0 = 0; h0 < HW; h0 += kRow) {
          const int64_t h1 = std::min(HW, h0 + kRow);
          __m512 s1 = _mm512_setzero_ps(), s2 = _mm512_setzero_ps();
          for (int64_t h = h0; h < h1; ++h) {
            const int64_t e = o + h * B16;
            const __m512 g = simd::load(dy + e);
            s1 = _mm512_add_ps(s1, g);
            s2 = _mm512_fmadd_ps(g, _mm512_sub_ps(simd::load(x + e), vm), s2);
          }
          simd::add_to_double(sdy, s1);
          simd::add_to_double(sdyx, s2);
        }
      });
      for (int64_t j = 0; j < B16; ++j) {
        const double istd = 1.0 / std::sqrt(static_cast<double>(var_in[c0 + j]) + eps);
        const double s2 = sdyx[j] * istd;  // sum dy xhat
        dbeta[c0 + j] = static_cast<float>(sdy[j]);
        dgamma[c0 + j] = static_cast<float>(s2);
        const double gs = static_cast<double>(gamma[c0 + j]) * istd;
        a[j] = static_cast<float>(gs);
        b[j] = training ? static_cast<float>(-gs * istd * s2 / n) : 0.0f;
        k[j] = training ? static_cast<float>(-gs * sdy[j] / n) : 0.0f;
      }
      const __m512 va = lanes_of(a), vb = lanes_of(b), vk = lanes_of(k);
      for_tiles(N, CB, HW, cb, [&](int64_t o) {
        for (int64_t h = 0; h < HW; ++h) {
          const int64_t e = o + h * B16;
          const __m512 t = _mm512_fmadd_ps(vb, _mm512_sub_ps(simd::load(x + e), vm), vk);
          simd::store(dx + e, _mm512_fmadd_ps(va, simd::load(dy + e), t));
        }
      });
    });
  }

  BatchNormParams p_;
  bool blocked_;
};

#endif

}  // namespace

std::unique_ptr<Kernel> make_batch_norm(const BatchNormParams& p, Layout l, ElemType act) {
  if (l == Layout::Blocked16 && p.C % kChannelBlock) return nullptr;
#if MEMFIT_BF16_SIMD
  if (act == ElemType::BF16) return std::make_unique<BatchNormFwdBf16>(p, l);
#endif
  return act == ElemType::F32 ? std::make_unique<BatchNormFwd>(p, l) : nullptr;
}
std::unique_ptr<Kernel> make_batch_norm_bwd(const BatchNormParams& p, Layout l, ElemType act) {
  if (l == Layout::Blocked16 && p.C % kChannelBlock) return nullptr;
#if MEMFIT_BF16_SIMD
  if (act == ElemType::BF16) return std::make_unique<BatchNormBwdBf16>(p, l);
#endif
  return act == ElemType::F32 ? std::make_unique<BatchNormBwd>(p, l) : nullptr;
}

}  // namespace memfit::kernels::cpu
