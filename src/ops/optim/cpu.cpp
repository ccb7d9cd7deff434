// k tensors; inputs are p_0..p_{k-1}, g_0..g_{k-1}, then the state tensors.
// One thread team covers all tensors: each tensor's loop is split across it
// without a barrier between tensors (they are independent).
#include "ops/optim/cpu.hpp"

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
// `layout` (compact updates): its bf16 gradients are read as bf16.
double clipped_scale(const std::vector<void*>& in, const std::vector<int64_t>& sizes, int64_t total,
                     double grad_scale, double clip_norm, const StateLayout* layout = nullptr) {
  if (clip_norm <= 0.0) return grad_scale;
  const size_t k = sizes.size();
  constexpr int64_t kBlock = 4096;
  const double ss = parallel_sum(total, [&] {
    double part = 0.0;
    for (size_t t = 0; t < k; ++t) {
      const float* g = static_cast<const float*>(in[k + t]);
      const bf16_t* g16 = layout && layout->grad16(t) ? static_cast<const bf16_t*>(in[k + t]) : nullptr;
      const int64_t n = sizes[t];
      // part is this thread's; blocks are split across the team.
#pragma omp for schedule(static) nowait
      for (int64_t b = 0; b < n; b += kBlock) {
        const int64_t e = b + kBlock < n ? b + kBlock : n;
        double s = 0.0;
        if (g16) {
#pragma omp simd reduction(+ : s)
          for (int64_t i = b; i < e; ++i) {
            const double x = bf16_to_f32(g16[i]);
            s += x * x;
          }
        } else {
#pragma omp simd reduction(+ : s)
          for (int64_t i = b; i < e; ++i) s += static_cast<double>(g[i]) * static_cast<double>(g[i]);
        }
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

// One moment of one block as the fused loops read and write it: load(i)
// gives element i in f32, store(i, x) keeps x (kernels/optim_state.hpp's
// codes and rounding). rescale(absmax), between the two loops, records the
// block's new scale (8-bit only).
struct F32Moment {
  float* p;
  float load(int64_t i) const { return p[i]; }
  void rescale(float) {}
  void store(int64_t i, float x) const { p[i] = x; }
};
struct Bf16Moment {
  bf16_t* p;
  uint64_t key;
  int64_t begin;
  uint32_t shift;  // 0: the rounding bits' low half, 16: the high half
  float load(int64_t i) const { return bf16_to_f32(p[i]); }
  void rescale(float) {}
  void store(int64_t i, float x) const {
    p[i] = qstate::bf16_stochastic(x, qstate::rounding_bits(key, begin + i) >> shift);
  }
};
template <bool kSigned>
struct Q8Moment {
  uint8_t* c;
  float* scale;  // this block's
  float a, inv = 0.0f;
  float load(int64_t i) const { return (kSigned ? qstate::decode_signed(c[i]) : qstate::decode_unsigned(c[i])) * a; }
  void rescale(float absmax) {
    *scale = absmax;
    inv = qstate::inverse_scale(absmax);
  }
  void store(int64_t i, float x) const { c[i] = kSigned ? qstate::encode_signed(x, inv) : qstate::encode_unsigned(x, inv); }
};
struct NoMoment {  // SGD's missing second moment
  float load(int64_t) const { return 0.0f; }
  void rescale(float) {}
  void store(int64_t, float) const {}
};

// The formulas of AdamUpdate and SgdUpdate per element, split where the
// block's moments are known finite: moments() from the stored ones and the
// gradient, then apply() to the parameter. l2 is the weight decay added to
// the gradient, dw the decoupled one (one of them 0).
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
  void moments(float w, float g, float l2, float& m, float& v) const {
    float d = g * gs;
    d += l2 * w;
    m = b1 * m + (1.0f - b1) * d;
    v = b2 * v + (1.0f - b2) * d * d;
  }
  void apply(float& w, float, float, float dw, float m, float v) const {
    w -= lr * dw * w;
    w -= lr * (m / c1) / (std::sqrt(v / c2) + eps);
  }
};

struct SgdRule {
  static constexpr size_t kMoments = 1;
  using Params = SgdParams;
  float lr, mom, gs, nesterov;
  SgdRule(const SgdParams& p, const StepContext& ctx, float g_scale)
      : lr(static_cast<float>(ctx.lr)), mom(static_cast<float>(p.momentum)), gs(g_scale), nesterov(p.nesterov) {}
  bool decoupled = false;
  void moments(float w, float g, float l2, float& m, float&) const { m = mom * m + (g * gs + l2 * w); }
  void apply(float& w, float g, float l2, float, float m, float) const {
    const float d = g * gs + l2 * w;
    w -= lr * (nesterov != 0.0f ? d + mom * m : m);
  }
};

// One work item per block of qstate::kQuantBlock elements of every tensor
// (a small f32 one is one block), statically split across the team. A block
// takes two fused loops: the first decodes its moments, updates them into
// f32 buffers on the thread's stack (16 KiB) and checks them (a NaN or Inf
// makes the check sum NaN) with their new absmax; if all are finite, the
// second moves the parameters and encodes the moments again. A block that
// is not finite is left as it was, and the step throws naming the first
// such block once the team is done (the other blocks are updated).
template <class Rule>
class CompactUpdate final : public Kernel {
 public:
  explicit CompactUpdate(typename Rule::Params p) : p_(std::move(p)), total_(total_of(p_.sizes)) {
    first_.push_back(0);
    for (int64_t n : p_.sizes) first_.push_back(first_.back() + qstate::blocks_of(n));
  }
  const char* name() const override { return Rule::kMoments == 2 ? "cpu.adam_update" : "cpu.sgd_update"; }
  void run(const StepContext& ctx) override {
    const float gs =
        static_cast<float>(clipped_scale(in_, p_.sizes, total_, ctx.grad_scale, p_.clip_norm, &p_.state));
    const Rule rule(p_, ctx, gs);
    const int64_t items = first_.back();
    std::atomic<int64_t> bad{INT64_MAX};
    parallel_region(total_, [&] {
      alignas(64) float buf[4][qstate::kQuantBlock];
#pragma omp for schedule(static) nowait
      for (int64_t it = 0; it < items; ++it) {
        const size_t t = tensor_of(it);
        const int64_t b = it - first_[t], begin = b * qstate::kQuantBlock;
        const int64_t n = std::min(qstate::kQuantBlock, p_.sizes[t] - begin);
        if (!block(rule, ctx, t, b, begin, n, buf[0], buf[1], buf[2], buf[3])) {
          int64_t seen = bad.load();
          while (it < seen && !bad.compare_exchange_weak(seen, it)) {
          }
        }
      }
    });
    if (const int64_t it = bad.load(); it != INT64_MAX) {
      const size_t t = tensor_of(it);
      const int64_t begin = (it - first_[t]) * qstate::kQuantBlock;
      throw std::runtime_error(qstate::nonfinite_message(p_.state.names[t], ctx.step, begin,
                                                         std::min(begin + qstate::kQuantBlock, p_.sizes[t])));
    }
  }

 private:
  typename Rule::Params p_;
  int64_t total_;
  std::vector<int64_t> first_;  // tensor t's blocks are items [first_[t], first_[t + 1])

  size_t tensor_of(int64_t it) const {
    return static_cast<size_t>(std::upper_bound(first_.begin(), first_.end(), it) - first_.begin() - 1);
  }

  void* state(size_t t, size_t s) const { return in_[(2 + s) * p_.sizes.size() + t]; }

  // Block b of tensor t in its format; false (nothing written) if not finite.
  // bf16 weights are widened into sw, updated there and rounded
  // stochastically back; bf16 gradients are widened into sg.
  bool block(const Rule& rule, const StepContext& ctx, size_t t, int64_t b, int64_t begin, int64_t n, float* sm,
             float* sv, float* sw, float* sg) const {
    const size_t k = p_.sizes.size();
    const bool w16 = !p_.state.bf16_weights.empty() && p_.state.bf16_weights[t];
    bf16_t* w16p = w16 ? in<bf16_t>(t) + begin : nullptr;
    if (w16) bf16_to_f32(w16p, sw, static_cast<size_t>(n));
    float* w = w16 ? sw : in<float>(t) + begin;
    const float* g = in<float>(k + t) + begin;
    if (p_.state.grad16(t)) {
      bf16_to_f32(in<bf16_t>(k + t) + begin, sg, static_cast<size_t>(n));
      g = sg;
    }
    const float wd = static_cast<float>(p_.weight_decay[t]);
    const float l2 = rule.decoupled ? 0.0f : wd, dw = rule.decoupled ? wd : 0.0f;
    auto run = [&](auto m0, auto m1) {
      if (!fused(rule, w, g, l2, dw, n, m0, m1, sm, sv)) return false;
      if (w16) {
        const uint64_t key = qstate::weight_rounding_key(ctx.seed, ctx.step, p_.state.names[t]);
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) w16p[i] = qstate::bf16_stochastic(w[i], qstate::rounding_bits(key, begin + i));
      }
      return true;
    };
    auto second = [&](auto m0, auto m1) {
      if constexpr (Rule::kMoments == 2) return run(m0, m1);
      else return run(m0, NoMoment{});
    };
    if (p_.state.format == StateFormat::BF16) {
      const uint64_t key = qstate::rounding_key(ctx.seed, ctx.step, p_.state.names[t]);
      return second(Bf16Moment{static_cast<bf16_t*>(state(t, 0)) + begin, key, begin, 0},
                    Bf16Moment{Rule::kMoments == 2 ? static_cast<bf16_t*>(state(t, 1)) + begin : nullptr, key, begin, 16});
    }
    if (p_.state.format == StateFormat::F32 && p_.sizes.size() * 2 == in_.size())  // sgd without momentum
      return run(NoMoment{}, NoMoment{});
    if (p_.state.format == StateFormat::F32 || !p_.state.blockwise[t])
      return second(F32Moment{static_cast<float*>(state(t, 0)) + begin},
                    F32Moment{Rule::kMoments == 2 ? static_cast<float*>(state(t, 1)) + begin : nullptr});
    float* scales = static_cast<float*>(in_[(2 + Rule::kMoments) * k + t]);
    const int64_t blocks = qstate::blocks_of(p_.sizes[t]);
    Q8Moment<true> m0{static_cast<uint8_t*>(state(t, 0)) + begin, scales + b, scales[b]};
    if constexpr (Rule::kMoments == 2)
      return run(m0, Q8Moment<false>{static_cast<uint8_t*>(state(t, 1)) + begin, scales + blocks + b, scales[blocks + b]});
    else
      return run(m0, NoMoment{});
  }

  template <class M0, class M1>
  static bool fused(const Rule& rule, float* w, const float* g, float l2, float dw, int64_t n, M0 m0, M1 m1, float* sm,
                    float* sv) {
    float chk = 0.0f, a0 = 0.0f, a1 = 0.0f;
#pragma omp simd reduction(+ : chk) reduction(max : a0, a1)
    for (int64_t i = 0; i < n; ++i) {
      float m = m0.load(i), v = m1.load(i);
      rule.moments(w[i], g[i], l2, m, v);
      sm[i] = m;
      sv[i] = v;
      chk += m * 0.0f + v * 0.0f;
      a0 = std::max(a0, m < 0 ? -m : m);
      a1 = std::max(a1, v);
    }
    if (chk != 0.0f) return false;
    m0.rescale(a0);
    m1.rescale(a1);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      rule.apply(w[i], g[i], l2, dw, sm[i], sv[i]);
      m0.store(i, sm[i]);
      m1.store(i, sv[i]);
    }
    return true;
  }
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

// Tensor by tensor, three passes, each split across the team:
//  1. rows: r = rho r + (1 - rho) mean(g'^2 + eps1) over each row (a 1-d
//     tensor: per element, with its update's square), and sum w^2 for the
//     relative step;
//  2. columns (factored), in tiles so that each column's sums run down the
//     rows in order: c = rho c + (1 - rho) mean(g'^2 + eps1), and
//     sum_i g'^2 / r_i, which makes the update's sum of squares without a
//     pass of its own: sum u^2 = mean(r) sum_j (sum_i g'^2 / r_i) / c_j;
//  3. the parameters, with 1 / sqrt(c) for the row at hand in the scratch
//     (the largest column count of the tensors, planned).
// Every sum is in double and in a fixed order for a given thread count.
class AdafactorUpdate final : public Kernel {
 public:
  explicit AdafactorUpdate(AdafactorParams p) : p_(std::move(p)), total_(total_of(p_.sizes)) {
    for (size_t t = 0; t < p_.sizes.size(); ++t)
      if (p_.rows[t]) cols_max_ = std::max(cols_max_, p_.sizes[t] / p_.rows[t]);
  }
  const char* name() const override { return "cpu.adafactor_update"; }
  size_t scratch_bytes() const override { return static_cast<size_t>(cols_max_) * sizeof(float); }
  void run(const StepContext& ctx) override {
    const size_t k = p_.sizes.size();
    const double t1 = static_cast<double>(ctx.step + 1);
    const float rho = static_cast<float>(1.0 - std::pow(t1, p_.decay_rate));
    const float gs = static_cast<float>(clipped_scale(in_, p_.sizes, total_, ctx.grad_scale, p_.clip_norm));
    const float eps1 = static_cast<float>(p_.eps1);
    float* cf = static_cast<float*>(scratch_);
    for (size_t t = 0; t < k; ++t) {
      float* w = in<float>(t);
      const float* g = in<float>(k + t);
      float* r = in<float>(2 * k + t);
      float* c = in<float>(3 * k + t);
      const int64_t n = p_.sizes[t];
      const bool factored = p_.rows[t] != 0;
      const int64_t R = factored ? p_.rows[t] : n, C = factored ? n / R : 1;
      const float* wsq = p_.relative_step ? w : nullptr;  // whose squares the rows add up
      double uu = 0.0;  // the update's sum of squares
      if (factored) {
        const double ww = row_means(g, wsq, r, R, C, gs, rho, eps1, n);
        double rs = 0.0;
        for (int64_t i = 0; i < R; ++i) rs += static_cast<double>(r[i]);
        const double rmean = rs / static_cast<double>(R);
        const double dr = column_means(g, r, c, R, C, gs, rho, eps1, n);
        uu = rmean * dr;
        for (int64_t j = 0; j < C; ++j) cf[j] = 1.0f / std::sqrt(c[j]);
        const float rm = static_cast<float>(rmean);
        const auto [a, step] = step_sizes(n, ctx, ww, uu);
        const float wd = static_cast<float>(p_.weight_decay[t]);
        parallel_for(R, n, [&](int64_t i) {
          float* wi = w + i * C;
          const float* gi = g + i * C;
          const float rf = gs / std::sqrt(r[i] / rm);  // g' / sqrt(r_i / mean(r))
#pragma omp simd
          for (int64_t j = 0; j < C; ++j) {
            wi[j] -= a * wd * wi[j];
            wi[j] -= step * (gi[j] * rf * cf[j]);
          }
        });
      } else {
        const double ww = wsq ? row_means(g, wsq, nullptr, n, 1, 1.0f, 1.0f, 0.0f, n) : 0.0;
        uu = ordered_sum(n, n, [&](int64_t b, int64_t e) {
          double part = 0.0;
#pragma omp simd reduction(+ : part)
          for (int64_t i = b; i < e; ++i) {
            const float d = g[i] * gs;
            r[i] = rho * r[i] + (1.0f - rho) * (d * d + eps1);
            const float u = d / std::sqrt(r[i]);
            part += static_cast<double>(u) * static_cast<double>(u);
          }
          return part;
        });
        const auto [a, step] = step_sizes(n, ctx, ww, uu);
        const float wd = static_cast<float>(p_.weight_decay[t]);
        parallel_for_simd(n, [&](int64_t i) {
          w[i] -= a * wd * w[i];
          w[i] -= step * (g[i] * gs / std::sqrt(r[i]));
        });
      }
    }
  }

 private:
  AdafactorParams p_;
  int64_t total_;
  int64_t cols_max_ = 1;

  // r = rho r + (1 - rho) mean over each row of g'^2 + eps1 (r null: none);
  // returns the sum of w^2 (w null: 0).
  static double row_means(const float* g, const float* w, float* r, int64_t R, int64_t C, float gs, float rho,
                          float eps1, int64_t work) {
    return ordered_sum(R, work, [&](int64_t b, int64_t e) {
      double part = 0.0;
      for (int64_t i = b; i < e; ++i) {
        if (r) {
          const float* gi = g + i * C;
          double s = 0.0;
#pragma omp simd reduction(+ : s)
          for (int64_t j = 0; j < C; ++j) {
            const float d = gi[j] * gs;
            s += static_cast<double>(d * d + eps1);
          }
          r[i] = rho * r[i] + (1.0f - rho) * static_cast<float>(s / static_cast<double>(C));
        }
        if (w) {
          const float* wi = w + i * C;
          double q = 0.0;
#pragma omp simd reduction(+ : q)
          for (int64_t j = 0; j < C; ++j) q += static_cast<double>(wi[j]) * static_cast<double>(wi[j]);
          part += q;
        }
      }
      return part;
    });
  }

  // c = rho c + (1 - rho) mean over the rows of g'^2 + eps1, in tiles of
  // kTile columns across the team; returns sum_j (sum_i g'^2 / r_i) / c_j.
  static double column_means(const float* g, const float* r, float* c, int64_t R, int64_t C, float gs, float rho,
                             float eps1, int64_t work) {
    constexpr int64_t kTile = 64;
    const int64_t tiles = (C + kTile - 1) / kTile;
    return ordered_sum(tiles, work, [&](int64_t tb, int64_t te) {
      double part = 0.0;
      for (int64_t tile = tb; tile < te; ++tile) {
        const int64_t j0 = tile * kTile, nj = std::min(kTile, C - j0);
        double s[kTile] = {}, q[kTile] = {};
        for (int64_t i = 0; i < R; ++i) {
          const float* gi = g + i * C + j0;
          const double ri = 1.0 / static_cast<double>(r[i]);
#pragma omp simd
          for (int64_t j = 0; j < nj; ++j) {
            const float d = gi[j] * gs;
            s[j] += static_cast<double>(d * d + eps1);
            q[j] += static_cast<double>(d * d) * ri;
          }
        }
        for (int64_t j = 0; j < nj; ++j) {
          c[j0 + j] = rho * c[j0 + j] + (1.0f - rho) * static_cast<float>(s[j] / static_cast<double>(R));
          part += q[j] / static_cast<double>(c[j0 + j]);
        }
      }
      return part;
    });
  }

  // The step size a (the relative one, or the learning rate) and a over the
  // update's clipping denominator max(1, rms(u) / clip_threshold).
  std::pair<float, float> step_sizes(int64_t n, const StepContext& ctx, double ww, double uu) const {
    const double denom = std::max(1.0, std::sqrt(uu / static_cast<double>(n)) / p_.clip_threshold);
    const double rel = std::min(1e-2, 1.0 / std::sqrt(static_cast<double>(ctx.step + 1)));
    const double a = p_.relative_step ? rel * std::max(p_.eps2, std::sqrt(ww / static_cast<double>(n))) : ctx.lr;
    return {static_cast<float>(a), static_cast<float>(a / denom)};
  }
};

}  // namespace

std::unique_ptr<Kernel> make_sgd_update(const SgdParams& p) {
  if ((p.momentum != 0.0 && p.state.format != StateFormat::F32) || p.state.any_bf16_weights() || p.state.any_bf16_grads())
    return std::make_unique<CompactUpdate<SgdRule>>(p);
  return std::make_unique<SgdUpdate>(p);
}
std::unique_ptr<Kernel> make_adam_update(const AdamParams& p) {
  if (p.state.format != StateFormat::F32 || p.state.any_bf16_weights() || p.state.any_bf16_grads())
    return std::make_unique<CompactUpdate<AdamRule>>(p);
  return std::make_unique<AdamUpdate>(p);
}

namespace {

// grad_accumulate into a bf16 accumulator (ref::GradAccumulateBf16's
// formula and rounding bits, qstate::accumulate_bf16), split across the team.
class GradAccumulateBf16 final : public Kernel {
 public:
  GradAccumulateBf16(int64_t n, std::string param) : n_(n), param_(std::move(param)) {}
  const char* name() const override { return "cpu.grad_accumulate"; }
  void run(const StepContext& ctx) override {
    bf16_t* acc = in<bf16_t>(0);
    const float* g = in<float>(1);
    const bool first = ctx.micro == 0;
    const uint64_t key = qstate::grad_rounding_key(ctx.seed, ctx.step, ctx.micro, param_);
    constexpr int64_t kChunk = 4096;
    const int64_t chunks = (n_ + kChunk - 1) / kChunk;
    parallel_for(chunks, n_, [&](int64_t c) {
      qstate::accumulate_bf16(acc, g, c * kChunk, std::min(n_, (c + 1) * kChunk), first, key);
    });
  }

 private:
  int64_t n_;
  std::string param_;
};

// grad_accumulate into an f32 accumulator (ref::GradAccumulate's copy on
// micro-batch 0 and one add after: the same bytes), split across the team.
class GradAccumulateF32 final : public Kernel {
 public:
  explicit GradAccumulateF32(int64_t n) : n_(n) {}
  const char* name() const override { return "cpu.grad_accumulate.f32"; }
  void run(const StepContext& ctx) override {
    float* acc = in<float>(0);
    const float* g = in<float>(1);
    const bool first = ctx.micro == 0;
    constexpr int64_t kChunk = 16384;
    parallel_for((n_ + kChunk - 1) / kChunk, n_, [&](int64_t c) {
      const int64_t i0 = c * kChunk, i1 = std::min(n_, i0 + kChunk);
      if (first) {
        std::copy(g + i0, g + i1, acc + i0);
      } else {
#pragma omp simd
        for (int64_t i = i0; i < i1; ++i) acc[i] += g[i];
      }
    });
  }

 private:
  int64_t n_;
};

}  // namespace

std::unique_ptr<Kernel> make_grad_accumulate_f32(int64_t n) { return std::make_unique<GradAccumulateF32>(n); }
std::unique_ptr<Kernel> make_grad_accumulate_bf16(int64_t n, const std::string& param) {
  return std::make_unique<GradAccumulateBf16>(n, param);
}
std::unique_ptr<Kernel> make_adafactor_update(const AdafactorParams& p) { return std::make_unique<AdafactorUpdate>(p); }

}  // namespace memfit::kernels::cpu
