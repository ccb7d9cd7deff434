// Scalar reference kernels for batch normalisation (the test oracle), exactly
// as ops/batchnorm/params.hpp (BatchNormParams) specifies. T is float or double;
// per-channel sums accumulate in double for either, so the f32 oracle does not
// lose the mean of a large batch to rounding.
// N batch, C channels, HW spatial positions (1 for [N, C] input); per channel
// the statistics run over n = N*HW values.
#pragma once

#include <cmath>

#include "kernels/kernel.hpp"
#include "ops/batchnorm/params.hpp"

namespace memfit::kernels::ref {

namespace bn_detail {

// Calls f(i) for the flat index i of every element of channel c.
template <class F>
inline void for_channel(const BatchNormParams& p, int64_t c, F&& f) {
  for (int64_t b = 0; b < p.N; ++b) {
    const int64_t base = (b * p.C + c) * p.HW;
    for (int64_t i = 0; i < p.HW; ++i) f(base + i);
  }
}

}  // namespace bn_detail

// in: x[N,C,HW], gamma[C], beta[C], running_mean[C], running_var[C]
// out: y, mean[C], var[C]
// training: batch statistics (biased variance normalises); the running
// statistics (inputs 3 and 4) are updated in place with the unbiased variance.
// eval: normalises with the running statistics, which it copies to mean/var.
template <class T>
class BatchNorm final : public Kernel {
 public:
  explicit BatchNorm(BatchNormParams p) : p_(p) {}
  const char* name() const override { return "ref.batch_norm"; }
  void run(const StepContext&) override {
    const T* x = in<T>(0);
    const T* gamma = in<T>(1);
    const T* beta = in<T>(2);
    T* rm = in<T>(3);
    T* rv = in<T>(4);
    T* y = out<T>(0);
    T* mean_out = out<T>(1);
    T* var_out = out<T>(2);
    const double n = static_cast<double>(p_.N * p_.HW);
    for (int64_t c = 0; c < p_.C; ++c) {
      double mean, var;
      if (p_.training) {
        double s = 0;
        bn_detail::for_channel(p_, c, [&](int64_t i) { s += static_cast<double>(x[i]); });
        mean = s / n;
        double ss = 0;
        bn_detail::for_channel(p_, c, [&](int64_t i) {
          const double d = static_cast<double>(x[i]) - mean;
          ss += d * d;
        });
        var = ss / n;
        const double m = p_.momentum;
        if (p_.update_stats) {
          rm[c] = static_cast<T>((1.0 - m) * static_cast<double>(rm[c]) + m * mean);
          rv[c] = static_cast<T>((1.0 - m) * static_cast<double>(rv[c]) + m * var * n / (n - 1.0));
        }
      } else {
        mean = static_cast<double>(rm[c]);
        var = static_cast<double>(rv[c]);
      }
      mean_out[c] = static_cast<T>(mean);
      var_out[c] = static_cast<T>(var);
      const double scale = static_cast<double>(gamma[c]) / std::sqrt(var + p_.eps);
      const double shift = static_cast<double>(beta[c]);
      bn_detail::for_channel(p_, c, [&](int64_t i) {
        y[i] = static_cast<T>((static_cast<double>(x[i]) - mean) * scale + shift);
      });
    }
  }

 private:
  BatchNormParams p_;
};

// in: x, dy, gamma, mean, var (the forward's statistics outputs)
// out: dx, dgamma[C], dbeta[C]
// With xhat = (x - mean) / sqrt(var + eps):
//   dbeta = sum dy, dgamma = sum dy xhat,
//   training: dx = gamma / sqrt(var + eps) * (dy - dbeta/n - xhat dgamma/n)
//   eval:     dx = gamma / sqrt(var + eps) * dy (the statistics are constants).
template <class T>
class BatchNormBwd final : public Kernel {
 public:
  explicit BatchNormBwd(BatchNormParams p) : p_(p) {}
  const char* name() const override { return "ref.batch_norm_bwd"; }
  void run(const StepContext&) override {
    const T* x = in<T>(0);
    const T* dy = in<T>(1);
    const T* gamma = in<T>(2);
    const T* mean_in = in<T>(3);
    const T* var_in = in<T>(4);
    T* dx = out<T>(0);
    T* dgamma = out<T>(1);
    T* dbeta = out<T>(2);
    const double n = static_cast<double>(p_.N * p_.HW);
    for (int64_t c = 0; c < p_.C; ++c) {
      const double mean = static_cast<double>(mean_in[c]);
      const double invstd = 1.0 / std::sqrt(static_cast<double>(var_in[c]) + p_.eps);
      double sdy = 0, sdyx = 0;
      bn_detail::for_channel(p_, c, [&](int64_t k) {
        const double g = static_cast<double>(dy[k]);
        sdy += g;
        sdyx += g * (static_cast<double>(x[k]) - mean) * invstd;
      });
      dbeta[c] = static_cast<T>(sdy);
      dgamma[c] = static_cast<T>(sdyx);
      const double gs = static_cast<double>(gamma[c]) * invstd;
      const double mdy = p_.training ? sdy / n : 0.0, mdyx = p_.training ? sdyx / n : 0.0;
      bn_detail::for_channel(p_, c, [&](int64_t k) {
        const double xhat = (static_cast<double>(x[k]) - mean) * invstd;
        dx[k] = static_cast<T>(gs * (static_cast<double>(dy[k]) - mdy - xhat * mdyx));
      });
    }
  }

 private:
  BatchNormParams p_;
};

}  // namespace memfit::kernels::ref
