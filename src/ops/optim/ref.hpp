// Scalar reference optimizer updates (see params.hpp for the exact formulas,
// which follow torch.optim.SGD / Adam / AdamW).
#pragma once

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/kernel.hpp"
#include "kernels/optim_state.hpp"
#include "ops/eltwise/params.hpp"  // grad_accumulate: n elements
#include "ops/optim/params.hpp"

namespace memfit::kernels::ref {

// Effective gradient multiplier: grad_scale, times the clipping factor when
// the global norm of grad_scale * g exceeds clip_norm. g_t = in(k + t).
// `layout` (compact updates): tensors whose gradient it stores in bf16 are
// read as bf16.
template <class T>
double clipped_scale(const std::vector<void*>& in, const std::vector<int64_t>& sizes, double grad_scale,
                     double clip_norm, const StateLayout* layout = nullptr) {
  if (clip_norm <= 0.0) return grad_scale;
  const size_t k = sizes.size();
  double ss = 0.0;
  for (size_t t = 0; t < k; ++t) {
    if (layout && layout->grad16(t)) {
      const bf16_t* g = static_cast<const bf16_t*>(in[k + t]);
      for (int64_t i = 0; i < sizes[t]; ++i) {
        const double x = bf16_to_f32(g[i]);
        ss += x * x;
      }
      continue;
    }
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

// sgd_update / adam_update with bf16 or 8-bit state, bf16 master weights or
// bf16 (accumulated) gradients (f32 storage: the double reference has none): SgdUpdate's and
// AdamUpdate's formulas, one block of qstate::kQuantBlock elements at a time,
// the moments decoded to f32 and encoded again by qstate::BlockStates, bf16
// weights widened and rounded stochastically again. A block whose new
// moments are not all finite is left as it was, and the step then throws
// naming it.
template <class P>
class CompactUpdate final : public Kernel {
  static constexpr bool kAdam = std::is_same_v<P, AdamParams>;

 public:
  explicit CompactUpdate(P p) : p_(std::move(p)) {}
  const char* name() const override { return kAdam ? "ref.adam_update" : "ref.sgd_update"; }
  void run(const StepContext& ctx) override {
    const size_t k = p_.sizes.size();
    size_t moments = 2;
    if constexpr (!kAdam) moments = p_.momentum != 0.0 ? 1 : 0;  // sgd without momentum: bf16 weights only
    const qstate::BlockStates io(p_.state, p_.sizes, in_, moments);
    const float gs = static_cast<float>(clipped_scale<float>(in_, p_.sizes, ctx.grad_scale, p_.clip_norm, &p_.state));
    if constexpr (kAdam) {
      const double t1 = static_cast<double>(ctx.step + 1);
      c1_ = static_cast<float>(1.0 - std::pow(p_.beta1, t1));
      c2_ = static_cast<float>(1.0 - std::pow(p_.beta2, t1));
    }
    float* st[2] = {m_.data(), v_.data()};
    std::string error;
    for (size_t t = 0; t < k; ++t) {
      const float wd = static_cast<float>(p_.weight_decay[t]);
      const bool w16 = !p_.state.bf16_weights.empty() && p_.state.bf16_weights[t];
      const uint64_t key = p_.state.names.empty() ? 0 : qstate::rounding_key(ctx.seed, ctx.step, p_.state.names[t]);
      const uint64_t wkey = w16 ? qstate::weight_rounding_key(ctx.seed, ctx.step, p_.state.names[t]) : 0;
      for (int64_t b = 0; b < qstate::blocks_of(p_.sizes[t]); ++b) {
        const int64_t begin = b * qstate::kQuantBlock, n = std::min(qstate::kQuantBlock, p_.sizes[t] - begin);
        // bf16 weights: updated in f32 here, then rounded stochastically.
        bf16_t* w16p = w16 ? in<bf16_t>(t) + begin : nullptr;
        if (w16)
          for (int64_t i = 0; i < n; ++i) w_[i] = bf16_to_f32(w16p[i]);
        float* w = w16 ? w_.data() : in<float>(t) + begin;
        // bf16 gradients (accumulated in bf16): widened here.
        const float* g = in<float>(k + t) + begin;
        if (p_.state.grad16(t)) {
          const bf16_t* g16 = in<bf16_t>(k + t) + begin;
          for (int64_t i = 0; i < n; ++i) g_[i] = bf16_to_f32(g16[i]);
          g = g_.data();
        }
        io.load(t, b, n, st);
        bool finite = true;
        for (int64_t i = 0; i < n; ++i) finite = update_moments(w[i], g[i] * gs, wd, m_[i], v_[i]) && finite;
        if (!finite) {
          if (error.empty()) error = qstate::nonfinite_message(p_.state.names[t], ctx.step, begin, begin + n);
          continue;
        }
        for (int64_t i = 0; i < n; ++i) apply(ctx, w[i], g[i] * gs, wd, m_[i], v_[i]);
        if (w16)
          for (int64_t i = 0; i < n; ++i) w16p[i] = qstate::bf16_stochastic(w[i], qstate::rounding_bits(wkey, begin + i));
        io.store(t, b, n, st, key);
      }
    }
    if (!error.empty()) throw std::runtime_error(error);
  }

 private:
  P p_;
  std::vector<float> m_ = std::vector<float>(qstate::kQuantBlock), v_ = std::vector<float>(qstate::kQuantBlock),
                     w_ = std::vector<float>(qstate::kQuantBlock), g_ = std::vector<float>(qstate::kQuantBlock);

  // The new moments of one element from its scaled gradient gg; false if
  // one is not finite.
  bool update_moments(float w, float gg, float wd, float& m, float& v) const {
    if constexpr (kAdam) {
      const float b1 = static_cast<float>(p_.beta1), b2 = static_cast<float>(p_.beta2);
      const float d = p_.decoupled ? gg : gg + wd * w;
      m = b1 * m + (1.0f - b1) * d;
      v = b2 * v + (1.0f - b2) * d * d;
      return std::isfinite(m) && std::isfinite(v);
    } else {
      m = static_cast<float>(p_.momentum) * m + (gg + wd * w);
      return std::isfinite(m);
    }
  }
  // One element's parameter update (SgdUpdate's and AdamUpdate's order).
  void apply(const StepContext& ctx, float& w, float gg, float wd, float m, float v) const {
    const float lr = static_cast<float>(ctx.lr);
    if constexpr (kAdam) {
      if (p_.decoupled) w -= lr * wd * w;
      w -= lr * (m / c1_) / (std::sqrt(v / c2_) + static_cast<float>(p_.eps));
    } else {
      const float d = gg + wd * w;
      w -= lr * (p_.nesterov ? d + static_cast<float>(p_.momentum) * m : m);
    }
  }
  float c1_ = 1, c2_ = 1;  // Adam's bias corrections of this step
};

// adafactor_update (params.hpp), in T; sums in double.
template <class T>
class AdafactorUpdate final : public Kernel {
 public:
  explicit AdafactorUpdate(AdafactorParams p) : p_(std::move(p)) {}
  const char* name() const override { return "ref.adafactor_update"; }
  void run(const StepContext& ctx) override {
    const size_t k = p_.sizes.size();
    const double t1 = static_cast<double>(ctx.step + 1);
    const double rho = 1.0 - std::pow(t1, p_.decay_rate);
    const double gs = clipped_scale<T>(in_, p_.sizes, ctx.grad_scale, p_.clip_norm);
    for (size_t t = 0; t < k; ++t) {
      T* w = in<T>(t);
      const T* g = in<T>(k + t);
      T* r = in<T>(2 * k + t);
      T* c = in<T>(3 * k + t);
      const int64_t n = p_.sizes[t], R = p_.rows[t], C = R ? n / R : 0;
      double a = ctx.lr;
      if (p_.relative_step) {
        double ww = 0;
        for (int64_t i = 0; i < n; ++i) ww += static_cast<double>(w[i]) * static_cast<double>(w[i]);
        a = std::min(1e-2, 1.0 / std::sqrt(t1)) * std::max(p_.eps2, std::sqrt(ww / static_cast<double>(n)));
      }
      auto d2 = [&](int64_t i) {
        const double d = static_cast<double>(g[i]) * gs;
        return d * d + p_.eps1;
      };
      double rmean = 0;
      if (R) {
        for (int64_t i = 0; i < R; ++i) {
          double s = 0;
          for (int64_t j = 0; j < C; ++j) s += d2(i * C + j);
          r[i] = static_cast<T>(rho * r[i] + (1 - rho) * (s / static_cast<double>(C)));
          rmean += static_cast<double>(r[i]);
        }
        rmean /= static_cast<double>(R);
        for (int64_t j = 0; j < C; ++j) {
          double s = 0;
          for (int64_t i = 0; i < R; ++i) s += d2(i * C + j);
          c[j] = static_cast<T>(rho * c[j] + (1 - rho) * (s / static_cast<double>(R)));
        }
      } else {
        for (int64_t i = 0; i < n; ++i) r[i] = static_cast<T>(rho * r[i] + (1 - rho) * d2(i));
      }
      // u = g' / sqrt(second moment): factored, r / mean(r) times c.
      auto u = [&](int64_t i) {
        const double d = static_cast<double>(g[i]) * gs;
        if (!R) return d / std::sqrt(static_cast<double>(r[i]));
        return d / std::sqrt(static_cast<double>(r[i / C]) / rmean) / std::sqrt(static_cast<double>(c[i % C]));
      };
      double uu = 0;
      for (int64_t i = 0; i < n; ++i) uu += u(i) * u(i);
      const double denom = std::max(1.0, std::sqrt(uu / static_cast<double>(n)) / p_.clip_threshold);
      for (int64_t i = 0; i < n; ++i) {
        const double ui = u(i);
        w[i] -= static_cast<T>(a * p_.weight_decay[t] * static_cast<double>(w[i]));
        w[i] -= static_cast<T>(a * ui / denom);
      }
    }
  }

 private:
  AdafactorParams p_;
};

// grad_accumulate with a bf16 accumulator  in: acc[n] (bf16), g[n] (f32):
// acc = g when ctx.micro == 0, else acc + g, the sum in f32 rounded to bf16
// stochastically (qstate::accumulate_bf16, keyed by the parameter's name).
class GradAccumulateBf16 final : public Kernel {
 public:
  GradAccumulateBf16(int64_t n, std::string param) : n_(n), param_(std::move(param)) {}
  const char* name() const override { return "ref.grad_accumulate"; }
  void run(const StepContext& ctx) override {
    qstate::accumulate_bf16(in<bf16_t>(0), in<float>(1), 0, n_, ctx.micro == 0,
                            qstate::grad_rounding_key(ctx.seed, ctx.step, ctx.micro, param_));
  }

 private:
  int64_t n_;
  std::string param_;
};

// grad_accumulate_matmul with a bf16 accumulator (params.hpp's
// AccumulateMatmulParams): each element's product summed in f32 in the
// order of the contracted axis, then added and rounded as
// qstate::accumulate_bf16 does.
class GradAccumulateMatmulBf16 final : public Kernel {
 public:
  explicit GradAccumulateMatmulBf16(AccumulateMatmulParams p) : p_(std::move(p)) {}
  const char* name() const override { return "ref.grad_accumulate_matmul"; }
  void run(const StepContext& ctx) override {
    bf16_t* acc = in<bf16_t>(0);
    const float* a = in<float>(1);
    const float* b = in<float>(2);
    const int64_t M = p_.M, N = p_.N, K = p_.K;
    const bool first = p_.first && ctx.micro == 0;
    const uint64_t key = qstate::grad_rounding_key(ctx.seed, ctx.step, ctx.micro, p_.param, p_.part);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        float s = 0.0f;
        for (int64_t k = 0; k < K; ++k)
          s += (p_.trans_a ? a[k * M + i] : a[i * K + k]) * (p_.trans_b ? b[j * K + k] : b[k * N + j]);
        qstate::accumulate_bf16_slice(acc, &s, i * N + j, i * N + j + 1, first, key);
      }
  }

 private:
  AccumulateMatmulParams p_;
};

// grad_accumulate_rows with a bf16 accumulator (AccumulateRowsParams): an
// id's rows found by a scan from its first position (no scratch).
class GradAccumulateRowsBf16 final : public Kernel {
 public:
  explicit GradAccumulateRowsBf16(AccumulateRowsParams p) : p_(std::move(p)) {}
  const char* name() const override { return "ref.grad_accumulate_rows"; }
  void run(const StepContext& ctx) override {
    bf16_t* acc = in<bf16_t>(0);
    const int32_t* ids = in<int32_t>(1);
    const float* dy = in<float>(2);
    const int64_t D = p_.D;
    if (p_.first && ctx.micro == 0) std::fill(acc, acc + p_.V * D, bf16_t(0));
    const uint64_t key = qstate::grad_rounding_key(ctx.seed, ctx.step, ctx.micro, p_.param, p_.part);
    for (int64_t i = 0; i < p_.n; ++i) {
      const int32_t id = ids[i];
      if (id < 0 || id >= p_.V || std::find(ids, ids + i, id) != ids + i) continue;
      for (int64_t j = 0; j < D; ++j) {
        float s = 0.0f;
        for (int64_t k = i; k < p_.n; ++k)
          if (ids[k] == id) s += dy[k * D + j];
        qstate::accumulate_bf16_slice(acc, &s, id * D + j, id * D + j + 1, false, key);
      }
    }
  }

 private:
  AccumulateRowsParams p_;
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

// grad_reduce  in: g[n] (f32): the sum of every rank's g into rank `root`'s
// (gradient sharding, ZeRO stage 2); one process: nothing to add.
class GradReduce final : public Kernel {
 public:
  GradReduce(int64_t n, int root) : n_(n), root_(root) {}
  const char* name() const override { return "grad_reduce"; }
  void run(const StepContext& ctx) override {
    if (ctx.comm) ctx.comm->reduce_sum(in<float>(0), static_cast<size_t>(n_), root_);
  }

 private:
  int64_t n_;
  int root_;
};

}  // namespace memfit::kernels::ref
