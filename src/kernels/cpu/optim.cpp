// k tensors; inputs are p_0..p_{k-1}, g_0..g_{k-1}, then the state tensors.
// One thread team covers all tensors: each tensor's loop is split across it
// without a barrier between tensors (they are independent).
#include "kernels/cpu/optim.hpp"

#include <cmath>
#include <numeric>

#include "kernels/cpu/parallel.hpp"

namespace memfit::kernels::cpu {
namespace {

int64_t total_of(const std::vector<int64_t>& sizes) { return std::accumulate(sizes.begin(), sizes.end(), int64_t(0)); }

// Effective gradient multiplier: grad_scale, times clip_norm / (norm + 1e-6)
// when the global L2 norm of grad_scale * g exceeds clip_norm (the sum of
// squares accumulates in double). g_t = in[k + t].
double clipped_scale(const std::vector<void*>& in, const std::vector<int64_t>& sizes, int64_t total,
                     double grad_scale, double clip_norm) {
  if (clip_norm <= 0.0) return grad_scale;
  const size_t k = sizes.size();
  constexpr int64_t kBlock = 4096;
  const double ss = parallel_sum(total, [&] {
    double part = 0.0;
    for (size_t t = 0; t < k; ++t) {
      const float* g = static_cast<const float*>(in[k + t]);
      const int64_t n = sizes[t];
      // part is this thread's; blocks are split across the team.
#pragma omp for schedule(static) nowait
      for (int64_t b = 0; b < n; b += kBlock) {
        const int64_t e = b + kBlock < n ? b + kBlock : n;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = b; i < e; ++i) s += static_cast<double>(g[i]) * static_cast<double>(g[i]);
        part += s;
      }
    }
    return part;
  });
  const double norm = std::sqrt(ss) * std::abs(grad_scale);
  const double coef = clip_norm / (norm + 1e-6);
  return coef < 1.0 ? grad_scale * coef : grad_scale;
}

// clip_norm > 0 first rescales gs (clipped_scale).
// d = g gs + wd w;  m = mom m + d;  d = nesterov ? d + mom m : m;  w -= lr d.
class SgdUpdate final : public Kernel {
 public:
  explicit SgdUpdate(SgdParams p) : p_(std::move(p)), total_(total_of(p_.sizes)) {}
  const char* name() const override { return "cpu.sgd_update"; }
  void run(const StepContext& ctx) override {
    const size_t k = p_.sizes.size();
    const float lr = static_cast<float>(ctx.lr), mom = static_cast<float>(p_.momentum);
    const float gs = static_cast<float>(clipped_scale(in_, p_.sizes, total_, ctx.grad_scale, p_.clip_norm));
    const bool use_m = p_.momentum != 0.0, nesterov = p_.nesterov;
    parallel_region(total_, [&] {
      for (size_t t = 0; t < k; ++t) {
        float* w = in<float>(t);
        const float* g = in<float>(k + t);
        float* m = use_m ? in<float>(2 * k + t) : nullptr;
        const float wd = static_cast<float>(p_.weight_decay[t]);
        const int64_t n = p_.sizes[t];
        if (!use_m) {
#pragma omp for simd schedule(static) nowait
          for (int64_t i = 0; i < n; ++i) {
            float d = g[i] * gs + wd * w[i];
            w[i] -= lr * d;
          }
        } else if (nesterov) {
#pragma omp for simd schedule(static) nowait
          for (int64_t i = 0; i < n; ++i) {
            float d = g[i] * gs + wd * w[i];
            m[i] = mom * m[i] + d;
            d = d + mom * m[i];
            w[i] -= lr * d;
          }
        } else {
#pragma omp for simd schedule(static) nowait
          for (int64_t i = 0; i < n; ++i) {
            float d = g[i] * gs + wd * w[i];
            m[i] = mom * m[i] + d;
            w[i] -= lr * m[i];
          }
        }
      }
    });
  }

 private:
  SgdParams p_;
  int64_t total_;
};

// t = step + 1; d = g gs (+ wd w); m = b1 m + (1-b1) d; v = b2 v + (1-b2) d d;
// w -= lr (m / c1) / (sqrt(v / c2) + eps), c = 1 - b^t; decoupled: w -= lr wd w first.
class AdamUpdate final : public Kernel {
 public:
  explicit AdamUpdate(AdamParams p) : p_(std::move(p)), total_(total_of(p_.sizes)) {}
  const char* name() const override { return "cpu.adam_update"; }
  void run(const StepContext& ctx) override {
    const size_t k = p_.sizes.size();
    const double t1 = static_cast<double>(ctx.step + 1);
    const float b1 = static_cast<float>(p_.beta1), b2 = static_cast<float>(p_.beta2);
    const float c1 = static_cast<float>(1.0 - std::pow(p_.beta1, t1)),
                c2 = static_cast<float>(1.0 - std::pow(p_.beta2, t1));
    const float lr = static_cast<float>(ctx.lr), eps = static_cast<float>(p_.eps);
    const float gs = static_cast<float>(clipped_scale(in_, p_.sizes, total_, ctx.grad_scale, p_.clip_norm));
    const bool decoupled = p_.decoupled;
    parallel_region(total_, [&] {
      for (size_t t = 0; t < k; ++t) {
        float* w = in<float>(t);
        const float* g = in<float>(k + t);
        float* m = in<float>(2 * k + t);
        float* v = in<float>(3 * k + t);
        const float wd = static_cast<float>(p_.weight_decay[t]);
        const int64_t n = p_.sizes[t];
        if (decoupled) {
#pragma omp for simd schedule(static) nowait
          for (int64_t i = 0; i < n; ++i) {
            const float d = g[i] * gs;
            w[i] -= lr * wd * w[i];
            m[i] = b1 * m[i] + (1.0f - b1) * d;
            v[i] = b2 * v[i] + (1.0f - b2) * d * d;
            w[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
          }
        } else {
#pragma omp for simd schedule(static) nowait
          for (int64_t i = 0; i < n; ++i) {
            float d = g[i] * gs;
            d += wd * w[i];
            m[i] = b1 * m[i] + (1.0f - b1) * d;
            v[i] = b2 * v[i] + (1.0f - b2) * d * d;
            w[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
          }
        }
      }
    });
  }

 private:
  AdamParams p_;
  int64_t total_;
};

}  // namespace

std::unique_ptr<Kernel> make_sgd_update(const SgdParams& p) { return std::make_unique<SgdUpdate>(p); }
std::unique_ptr<Kernel> make_adam_update(const AdamParams& p) { return std::make_unique<AdamUpdate>(p); }

}  // namespace memfit::kernels::cpu
