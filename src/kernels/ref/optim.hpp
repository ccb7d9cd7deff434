// Scalar reference optimizer updates (see params.hpp for the exact formulas,
// which follow torch.optim.SGD / Adam / AdamW).
#pragma once

#include <cmath>

#include "kernels/kernel.hpp"
#include "kernels/params.hpp"

namespace memfit::kernels::ref {

// Effective gradient multiplier: grad_scale, times the clipping factor when
// the global norm of grad_scale * g exceeds clip_norm. g_t = in(k + t).
template <class T>
double clipped_scale(const std::vector<void*>& in, const std::vector<int64_t>& sizes, double grad_scale,
                     double clip_norm) {
  if (clip_norm <= 0.0) return grad_scale;
  const size_t k = sizes.size();
  double ss = 0.0;
  for (size_t t = 0; t < k; ++t) {
    const T* g = static_cast<const T*>(in[k + t]);
    for (int64_t i = 0; i < sizes[t]; ++i) ss += static_cast<double>(g[i]) * static_cast<double>(g[i]);
  }
  const double norm = std::sqrt(ss) * std::abs(grad_scale);
  const double coef = clip_norm / (norm + 1e-6);
  return coef < 1.0 ? grad_scale * coef : grad_scale;
}

template <class T>
class SgdUpdate final : public Kernel {
 public:
  explicit SgdUpdate(SgdParams p) : p_(std::move(p)) {}
  const char* name() const override { return "ref.sgd_update"; }
  void run(const StepContext& ctx) override {
    const size_t k = p_.sizes.size();
    const T lr = static_cast<T>(ctx.lr), mom = static_cast<T>(p_.momentum);
    const T gs = static_cast<T>(clipped_scale<T>(in_, p_.sizes, ctx.grad_scale, p_.clip_norm));
    for (size_t t = 0; t < k; ++t) {
      T* w = in<T>(t);
      const T* g = in<T>(k + t);
      T* m = p_.momentum != 0.0 ? in<T>(2 * k + t) : nullptr;
      const T wd = static_cast<T>(p_.weight_decay[t]);
      for (int64_t i = 0; i < p_.sizes[t]; ++i) {
        T d = g[i] * gs + wd * w[i];
        if (m) {
          m[i] = mom * m[i] + d;
          d = p_.nesterov ? d + mom * m[i] : m[i];
        }
        w[i] -= lr * d;
      }
    }
  }

 private:
  SgdParams p_;
};

template <class T>
class AdamUpdate final : public Kernel {
 public:
  explicit AdamUpdate(AdamParams p) : p_(std::move(p)) {}
  const char* name() const override { return "ref.adam_update"; }
  void run(const StepContext& ctx) override {
    const size_t k = p_.sizes.size();
    const double t1 = static_cast<double>(ctx.step + 1);
    const T b1 = static_cast<T>(p_.beta1), b2 = static_cast<T>(p_.beta2);
    const T c1 = static_cast<T>(1.0 - std::pow(p_.beta1, t1)), c2 = static_cast<T>(1.0 - std::pow(p_.beta2, t1));
    const T lr = static_cast<T>(ctx.lr), eps = static_cast<T>(p_.eps);
    const T gs = static_cast<T>(clipped_scale<T>(in_, p_.sizes, ctx.grad_scale, p_.clip_norm));
    for (size_t t = 0; t < k; ++t) {
      T* w = in<T>(t);
      const T* g = in<T>(k + t);
      T* m = in<T>(2 * k + t);
      T* v = in<T>(3 * k + t);
      const T wd = static_cast<T>(p_.weight_decay[t]);
      for (int64_t i = 0; i < p_.sizes[t]; ++i) {
        T d = g[i] * gs;
        if (p_.decoupled) w[i] -= lr * wd * w[i];
        else d += wd * w[i];
        m[i] = b1 * m[i] + (T(1) - b1) * d;
        v[i] = b2 * v[i] + (T(1) - b2) * d * d;
        w[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
      }
    }
  }

 private:
  AdamParams p_;
};

// grad_accumulate  in: acc[n], g[n]; acc = g when ctx.micro == 0, else acc += g.
template <class T>
class GradAccumulate final : public Kernel {
 public:
  explicit GradAccumulate(EltwiseParams p) : p_(p) {}
  const char* name() const override { return "ref.grad_accumulate"; }
  void run(const StepContext& ctx) override {
    T* acc = in<T>(0);
    const T* g = in<T>(1);
    if (ctx.micro == 0)
      for (int64_t i = 0; i < p_.n; ++i) acc[i] = g[i];
    else
      for (int64_t i = 0; i < p_.n; ++i) acc[i] += g[i];
  }

 private:
  EltwiseParams p_;
};

}  // namespace memfit::kernels::ref
