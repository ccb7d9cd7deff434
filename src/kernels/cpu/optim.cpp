// k tensors; inputs are p_0..p_{k-1}, g_0..g_{k-1}, then the state tensors.
// One thread team covers all tensors: each tensor's loop is split across it
// without a barrier between tensors (they are independent).
#include "kernels/cpu/optim.hpp"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "kernels/cpu/parallel.hpp"
#include "kernels/optim_state.hpp"

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

// ---- bf16 and 8-bit state

// The formulas of AdamUpdate and SgdUpdate split in two passes over a block
// whose moments are f32 buffers: moments() updates them (and reports
// whether they are all finite: a NaN or Inf makes the check sum NaN), then
// apply() moves the parameters. Nothing is written to the parameters before
// the block is known to be finite.
struct AdamRule {
  static constexpr size_t kMoments = 2;
  using Params = AdamParams;
  float b1, b2, c1, c2, lr, eps, gs;
  bool decoupled;
  AdamRule(const AdamParams& p, const StepContext& ctx, float g_scale)
      : b1(static_cast<float>(p.beta1)),
        b2(static_cast<float>(p.beta2)),
        c1(static_cast<float>(1.0 - std::pow(p.beta1, static_cast<double>(ctx.step + 1)))),
        c2(static_cast<float>(1.0 - std::pow(p.beta2, static_cast<double>(ctx.step + 1)))),
        lr(static_cast<float>(ctx.lr)),
        eps(static_cast<float>(p.eps)),
        gs(g_scale),
        decoupled(p.decoupled) {}
  bool moments(const float* w, const float* g, float* const* st, int64_t n, float wd) const {
    float* m = st[0];
    float* v = st[1];
    float chk = 0.0f;
    if (decoupled) {
#pragma omp simd reduction(+ : chk)
      for (int64_t i = 0; i < n; ++i) {
        const float d = g[i] * gs;
        m[i] = b1 * m[i] + (1.0f - b1) * d;
        v[i] = b2 * v[i] + (1.0f - b2) * d * d;
        chk += m[i] * 0.0f + v[i] * 0.0f;
      }
    } else {
#pragma omp simd reduction(+ : chk)
      for (int64_t i = 0; i < n; ++i) {
        float d = g[i] * gs;
        d += wd * w[i];
        m[i] = b1 * m[i] + (1.0f - b1) * d;
        v[i] = b2 * v[i] + (1.0f - b2) * d * d;
        chk += m[i] * 0.0f + v[i] * 0.0f;
      }
    }
    return chk == 0.0f;
  }
  void apply(float* w, const float*, float* const* st, int64_t n, float wd) const {
    const float* m = st[0];
    const float* v = st[1];
    if (decoupled) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        w[i] -= lr * wd * w[i];
        w[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
      }
    } else {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) w[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
    }
  }
};

struct SgdRule {
  static constexpr size_t kMoments = 1;
  using Params = SgdParams;
  float lr, mom, gs;
  bool nesterov;
  SgdRule(const SgdParams& p, const StepContext& ctx, float g_scale)
      : lr(static_cast<float>(ctx.lr)), mom(static_cast<float>(p.momentum)), gs(g_scale), nesterov(p.nesterov) {}
  bool moments(const float* w, const float* g, float* const* st, int64_t n, float wd) const {
    float* m = st[0];
    float chk = 0.0f;
#pragma omp simd reduction(+ : chk)
    for (int64_t i = 0; i < n; ++i) {
      m[i] = mom * m[i] + (g[i] * gs + wd * w[i]);
      chk += m[i] * 0.0f;
    }
    return chk == 0.0f;
  }
  void apply(float* w, const float* g, float* const* st, int64_t n, float wd) const {
    const float* m = st[0];
    if (nesterov) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        const float d = g[i] * gs + wd * w[i];
        w[i] -= lr * (d + mom * m[i]);
      }
    } else {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) w[i] -= lr * m[i];
    }
  }
};

// One work item per block of qstate::kQuantBlock elements of every tensor
// (a small f32 one is one block), statically split across the team; each
// thread decodes a block's moments onto its stack (16 KiB), updates them and
// the parameters in f32, and encodes them again (qstate::BlockStates). A
// block that is not finite is left as it was, and the step throws naming the
// first such block once the team is done (the other blocks are updated).
template <class Rule>
class CompactUpdate final : public Kernel {
 public:
  explicit CompactUpdate(typename Rule::Params p) : p_(std::move(p)), total_(total_of(p_.sizes)) {
    first_.push_back(0);
    for (int64_t n : p_.sizes) first_.push_back(first_.back() + qstate::blocks_of(n));
  }
  const char* name() const override { return Rule::kMoments == 2 ? "cpu.adam_update" : "cpu.sgd_update"; }
  void run(const StepContext& ctx) override {
    const size_t k = p_.sizes.size();
    const float gs = static_cast<float>(clipped_scale(in_, p_.sizes, total_, ctx.grad_scale, p_.clip_norm));
    const Rule rule(p_, ctx, gs);
    const qstate::BlockStates io(p_.state, p_.sizes, in_, Rule::kMoments);
    const int64_t items = first_.back();
    std::atomic<int64_t> bad{INT64_MAX};
    parallel_region(total_, [&] {
      alignas(64) float buf[Rule::kMoments][qstate::kQuantBlock];
      float* st[Rule::kMoments];
      for (size_t s = 0; s < Rule::kMoments; ++s) st[s] = buf[s];
#pragma omp for schedule(static) nowait
      for (int64_t it = 0; it < items; ++it) {
        const size_t t = static_cast<size_t>(std::upper_bound(first_.begin(), first_.end(), it) - first_.begin() - 1);
        const int64_t b = it - first_[t], begin = b * qstate::kQuantBlock;
        const int64_t n = std::min(qstate::kQuantBlock, p_.sizes[t] - begin);
        float* w = in<float>(t) + begin;
        const float* g = in<float>(k + t) + begin;
        const float wd = static_cast<float>(p_.weight_decay[t]);
        io.load(t, b, n, st);
        if (!rule.moments(w, g, st, n, wd)) {
          int64_t seen = bad.load();
          while (it < seen && !bad.compare_exchange_weak(seen, it)) {
          }
          continue;
        }
        rule.apply(w, g, st, n, wd);
        io.store(t, b, n, st, qstate::rounding_key(ctx.seed, ctx.step, t));
      }
    });
    if (const int64_t it = bad.load(); it != INT64_MAX) {
      const size_t t = static_cast<size_t>(std::upper_bound(first_.begin(), first_.end(), it) - first_.begin() - 1);
      const int64_t begin = (it - first_[t]) * qstate::kQuantBlock;
      throw std::runtime_error(qstate::nonfinite_message(p_.state.names[t], ctx.step, begin,
                                                         std::min(begin + qstate::kQuantBlock, p_.sizes[t])));
    }
  }

 private:
  typename Rule::Params p_;
  int64_t total_;
  std::vector<int64_t> first_;  // tensor t's blocks are items [first_[t], first_[t + 1])
};

// ---- adafactor

// Deterministic sum over [0, n) split statically across the team: each
// thread's part(begin, end) lands in its slot and the slots add up in
// thread order, so the result depends on the thread count only (an OpenMP
// reduction adds in arrival order).
template <class F>
double ordered_sum(int64_t n, int64_t work, F&& part) {
  if (!use_team(work)) return part(int64_t(0), n);
  constexpr int kMaxThreads = 256;
  double parts[kMaxThreads] = {};
  int used = 1;
#pragma omp parallel
  {
    const int nt = std::min(omp_get_num_threads(), kMaxThreads), id = omp_get_thread_num();
    if (id == 0) used = nt;
    if (id < nt) {
      const int64_t b = n * id / nt, e = n * (id + 1) / nt;
      parts[id] = part(b, e);
    }
  }
  double s = 0.0;
  for (int i = 0; i < used; ++i) s += parts[i];
  return s;
}

// Tensor by tensor, each pass split across the team: the row means of
// g'^2 + eps1 (with the parameter's sum of squares, for the relative step),
// the column means (column tiles, so that each column's sum runs down the
// rows in order), the update's RMS, then the parameters. Every sum is in
// double and in a fixed order for a given thread count.
class AdafactorUpdate final : public Kernel {
 public:
  explicit AdafactorUpdate(AdafactorParams p) : p_(std::move(p)), total_(total_of(p_.sizes)) {}
  const char* name() const override { return "cpu.adafactor_update"; }
  void run(const StepContext& ctx) override {
    const size_t k = p_.sizes.size();
    const double t1 = static_cast<double>(ctx.step + 1);
    const float rho = static_cast<float>(1.0 - std::pow(t1, p_.decay_rate));
    const float gs = static_cast<float>(clipped_scale(in_, p_.sizes, total_, ctx.grad_scale, p_.clip_norm));
    const double rel = std::min(1e-2, 1.0 / std::sqrt(t1));
    for (size_t t = 0; t < k; ++t) {
      float* w = in<float>(t);
      const float* g = in<float>(k + t);
      float* r = in<float>(2 * k + t);
      float* c = in<float>(3 * k + t);
      const int64_t n = p_.sizes[t], R = p_.rows[t] ? p_.rows[t] : n, C = p_.rows[t] ? n / R : 1;
      const bool factored = p_.rows[t] != 0;
      const float eps1 = static_cast<float>(p_.eps1);
      // Rows: r = rho r + (1 - rho) mean(g'^2 + eps1) (unfactored: per element), and sum w^2.
      const double ww = ordered_sum(R, n, [&](int64_t b, int64_t e) {
        double part = 0.0;
        for (int64_t i = b; i < e; ++i) {
          const float* gi = g + i * C;
          const float* wi = w + i * C;
          double s = 0.0, q = 0.0;
#pragma omp simd reduction(+ : s, q)
          for (int64_t j = 0; j < C; ++j) {
            const float d = gi[j] * gs;
            s += static_cast<double>(d * d + eps1);
            q += static_cast<double>(wi[j]) * static_cast<double>(wi[j]);
          }
          r[i] = rho * r[i] + (1.0f - rho) * static_cast<float>(s / static_cast<double>(C));
          part += q;
        }
        return part;
      });
      double rmean = 1.0;
      if (factored) {
        double rs = 0.0;
        for (int64_t i = 0; i < R; ++i) rs += static_cast<double>(r[i]);
        rmean = rs / static_cast<double>(R);
        column_means(g, c, R, C, gs, rho, eps1, n);
      }
      const float rm = static_cast<float>(rmean);
      // u = g' / sqrt(r / mean(r) c), or g' / sqrt(r); its RMS.
      const double uu = ordered_sum(R, n, [&](int64_t b, int64_t e) {
        double part = 0.0;
        for (int64_t i = b; i < e; ++i) {
          const float* gi = g + i * C;
          const float rf = 1.0f / std::sqrt(r[i] / rm);
          double s = 0.0;
          if (factored) {
#pragma omp simd reduction(+ : s)
            for (int64_t j = 0; j < C; ++j) {
              const float u = gi[j] * gs * rf / std::sqrt(c[j]);
              s += static_cast<double>(u) * static_cast<double>(u);
            }
          } else {
            const float u = gi[0] * gs * rf;
            s = static_cast<double>(u) * static_cast<double>(u);
          }
          part += s;
        }
        return part;
      });
      const float denom = static_cast<float>(std::max(1.0, std::sqrt(uu / static_cast<double>(n)) / p_.clip_threshold));
      const float a = static_cast<float>(
          p_.relative_step ? rel * std::max(p_.eps2, std::sqrt(ww / static_cast<double>(n))) : ctx.lr);
      const float wd = static_cast<float>(p_.weight_decay[t]);
      parallel_for(R, n, [&](int64_t i) {
        float* wi = w + i * C;
        const float* gi = g + i * C;
        const float rf = 1.0f / std::sqrt(r[i] / rm);
        if (factored) {
#pragma omp simd
          for (int64_t j = 0; j < C; ++j) {
            const float u = gi[j] * gs * rf / std::sqrt(c[j]);
            wi[j] -= a * wd * wi[j];
            wi[j] -= a * (u / denom);
          }
        } else {
          const float u = gi[0] * gs * rf;
          wi[0] -= a * wd * wi[0];
          wi[0] -= a * (u / denom);
        }
      });
    }
  }

 private:
  AdafactorParams p_;
  int64_t total_;

  // c = rho c + (1 - rho) mean over rows of g'^2 + eps1: tiles of kTile
  // columns across the team, each summed down the rows on the stack.
  static void column_means(const float* g, float* c, int64_t R, int64_t C, float gs, float rho, float eps1,
                           int64_t work) {
    constexpr int64_t kTile = 64;
    const int64_t tiles = (C + kTile - 1) / kTile;
    parallel_for(tiles, work, [&](int64_t tile) {
      const int64_t j0 = tile * kTile, nj = std::min(kTile, C - j0);
      double s[kTile] = {};
      for (int64_t i = 0; i < R; ++i) {
        const float* gi = g + i * C + j0;
#pragma omp simd
        for (int64_t j = 0; j < nj; ++j) {
          const float d = gi[j] * gs;
          s[j] += static_cast<double>(d * d + eps1);
        }
      }
      for (int64_t j = 0; j < nj; ++j)
        c[j0 + j] = rho * c[j0 + j] + (1.0f - rho) * static_cast<float>(s[j] / static_cast<double>(R));
    });
  }
};

}  // namespace

std::unique_ptr<Kernel> make_sgd_update(const SgdParams& p) {
  if (p.momentum != 0.0 && p.state.format != StateFormat::F32) return std::make_unique<CompactUpdate<SgdRule>>(p);
  return std::make_unique<SgdUpdate>(p);
}
std::unique_ptr<Kernel> make_adam_update(const AdamParams& p) {
  if (p.state.format != StateFormat::F32) return std::make_unique<CompactUpdate<AdamRule>>(p);
  return std::make_unique<AdamUpdate>(p);
}
std::unique_ptr<Kernel> make_adafactor_update(const AdafactorParams& p) { return std::make_unique<AdafactorUpdate>(p); }

}  // namespace memfit::kernels::cpu
