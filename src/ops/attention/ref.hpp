// Scalar reference kernels for the fused attention op (the test oracle), as
// ops/attention/params.hpp specifies. T is float or double; the
// arithmetic is double for either. One query row at a time: its S scores go
// into the kernel's scratch (S doubles), never a [T, S] matrix.
#pragma once

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/kernel.hpp"
#include "ops/attention/params.hpp"

namespace memfit::kernels::ref {

namespace attn_detail {

// Scores of row i of head (b, h) into s[0, S): scale q_i . k_j where key j is
// attended, -inf elsewhere. Returns their max (-inf: no key attended).
template <class T>
double row_scores(const AttentionParams& p, const T* q, const T* k, const int32_t* mask, int64_t b, int64_t h,
                  int64_t i, double* s) {
  const double ninf = -std::numeric_limits<double>::infinity();
  const RowMap qm = p.q_map(), km = p.k_map();
  const T* qi = q + qm.at(b, h, i);
  const int64_t end = p.key_end(i);
  double mx = ninf;
  for (int64_t j = 0; j < p.S; ++j) {
    if (j >= end || (mask && mask[b * p.S + j] == 0)) {
      s[j] = ninf;
      continue;
    }
    const T* kj = k + km.at(b, h, j);
    double d = 0;
    for (int64_t c = 0; c < p.D; ++c) d += static_cast<double>(qi[c]) * static_cast<double>(kj[c]);
    s[j] = d * p.scale;
    mx = std::max(mx, s[j]);
  }
  return mx;
}

// Dropout factor of element (bh, i, j): 1/(1-p) if kept, else 0.
inline double keep_factor(const AttentionParams& p, const AttentionDraw& dr, int64_t bh, int64_t i, int64_t j) {
  if (p.dropout <= 0.0) return 1.0;
  const uint64_t idx = dr.base + static_cast<uint64_t>((bh * p.T + i) * p.S + j);
  return rng::uniform01(dr.key, idx) >= static_cast<float>(p.dropout) ? 1.0 / (1.0 - p.dropout) : 0.0;
}

}  // namespace attn_detail

// in: q, k, v[, mask] (or qkv[, mask])  out: out, lse
template <class T>
class Attention final : public Kernel {
 public:
  explicit Attention(AttentionParams p) : p_(p) {}
  const char* name() const override { return "ref.attention"; }
  size_t scratch_bytes() const override { return static_cast<size_t>(p_.S) * sizeof(double); }
  void run(const StepContext& ctx) override {
    const T *q = in<T>(0), *k = in<T>(p_.k_input()), *v = in<T>(p_.v_input());
    const int32_t* mask = p_.mask ? in<int32_t>(p_.qkv_inputs()) : nullptr;
    T* o = out<T>(0);
    T* lse = out<T>(1);
    double* s = static_cast<double*>(scratch_);
    const auto dr = attention_draw(p_, ctx.seed, ctx.step, ctx.row0);
    const int64_t S = p_.S, Dv = p_.Dv, T_ = p_.T;
    const RowMap vm = p_.v_map(), om = p_.o_map();
    for (int64_t bh = 0; bh < p_.B * p_.H; ++bh) {
      const int64_t b = bh / p_.H, h = bh % p_.H;
      for (int64_t i = 0; i < T_; ++i) {
        const int64_t r = bh * T_ + i;
        T* orow = o + om.at(b, h, i);
        const double mx = attn_detail::row_scores(p_, q, k, mask, b, h, i, s);
        if (mx == -std::numeric_limits<double>::infinity()) {  // no key attended
          for (int64_t c = 0; c < Dv; ++c) orow[c] = T(0);
          lse[r] = static_cast<T>(mx);
          continue;
        }
        double sum = 0;
        for (int64_t j = 0; j < S; ++j) sum += std::exp(s[j] - mx);  // exp(-inf) = 0
        const double l = mx + std::log(sum);
        lse[r] = static_cast<T>(l);
        for (int64_t j = 0; j < S; ++j)  // the weights P_ij keep_ij / (1 - p), in place of the scores
          s[j] = std::exp(s[j] - l) * attn_detail::keep_factor(p_, dr, bh, i, j);
        for (int64_t c = 0; c < Dv; ++c) {
          double a = 0;
          for (int64_t j = 0; j < S; ++j) a += s[j] * static_cast<double>(v[vm.at(b, h, j) + c]);
          orow[c] = static_cast<T>(a);
        }
      }
    }
  }

 private:
  AttentionParams p_;
};

// in: q, k, v (or qkv), out, lse, dout[, mask]  out: dq, dk, dv (or dqkv; assigned)
template <class T>
class AttentionBwd final : public Kernel {
 public:
  explicit AttentionBwd(AttentionParams p) : p_(p) {}
  const char* name() const override { return "ref.attention_bwd"; }
  size_t scratch_bytes() const override { return static_cast<size_t>(p_.S) * sizeof(double); }
  void run(const StepContext& ctx) override {
    const size_t n = p_.qkv_inputs();
    const T *q = in<T>(0), *k = in<T>(p_.k_input()), *v = in<T>(p_.v_input());
    const T *o = in<T>(n), *lse = in<T>(n + 1), *dout = in<T>(n + 2);
    const int32_t* mask = p_.mask ? in<int32_t>(n + 3) : nullptr;
    T *dq = out<T>(0), *dk = out<T>(p_.k_input()), *dv = out<T>(p_.v_input());
    double* s = static_cast<double*>(scratch_);
    const auto dr = attention_draw(p_, ctx.seed, ctx.step, ctx.row0);
    const int64_t S = p_.S, D = p_.D, Dv = p_.Dv, T_ = p_.T, BH = p_.B * p_.H;
    const RowMap qm = p_.q_map(), km = p_.k_map(), vm = p_.v_map(), om = p_.o_map();
    // Every layout is dense: the buffers hold exactly these elements.
    std::memset(dq, 0, sizeof(T) * static_cast<size_t>(BH * T_ * D * (p_.packed() ? 3 : 1)));
    if (!p_.packed()) {
      std::memset(dk, 0, sizeof(T) * static_cast<size_t>(BH * S * D));
      std::memset(dv, 0, sizeof(T) * static_cast<size_t>(BH * S * Dv));
    }
    for (int64_t bh = 0; bh < BH; ++bh) {
      const int64_t b = bh / p_.H, h = bh % p_.H;
      for (int64_t i = 0; i < T_; ++i) {
        const int64_t r = bh * T_ + i;
        const double l = static_cast<double>(lse[r]);
        if (l == -std::numeric_limits<double>::infinity()) continue;  // no key attended: zero gradients
        const T* qi = q + qm.at(b, h, i);
        const T* doi = dout + om.at(b, h, i);
        const T* oi = o + om.at(b, h, i);
        T* dqi = dq + qm.at(b, h, i);
        attn_detail::row_scores(p_, q, k, mask, b, h, i, s);
        double delta = 0;
        for (int64_t c = 0; c < Dv; ++c) delta += static_cast<double>(doi[c]) * static_cast<double>(oi[c]);
        for (int64_t j = 0; j < S; ++j) {
          if (s[j] == -std::numeric_limits<double>::infinity()) continue;
          const T *kj = k + km.at(b, h, j), *vj = v + vm.at(b, h, j);
          T *dkj = dk + km.at(b, h, j), *dvj = dv + vm.at(b, h, j);
          const double P = std::exp(s[j] - l), f = attn_detail::keep_factor(p_, dr, bh, i, j);
          double dp = 0;
          for (int64_t c = 0; c < Dv; ++c) dp += static_cast<double>(doi[c]) * static_cast<double>(vj[c]);
          for (int64_t c = 0; c < Dv; ++c)
            dvj[c] = static_cast<T>(static_cast<double>(dvj[c]) + P * f * static_cast<double>(doi[c]));
          const double ds = P * (dp * f - delta) * p_.scale;
          for (int64_t c = 0; c < D; ++c) {
            dqi[c] = static_cast<T>(static_cast<double>(dqi[c]) + ds * static_cast<double>(kj[c]));
            dkj[c] = static_cast<T>(static_cast<double>(dkj[c]) + ds * static_cast<double>(qi[c]));
          }
        }
      }
    }
  }

 private:
  AttentionParams p_;
};

}  // namespace memfit::kernels::ref
