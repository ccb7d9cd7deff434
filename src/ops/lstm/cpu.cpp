// Fast CPU LSTM, f32. N batch, T time steps, I input features, H hidden
// features, G = 4H gate rows (i, f, g, o).
//
// Why matmuls and a fused gate loop rather than oneDNN's LSTM primitive: the
// primitive has no per-sample lengths (a packed sequence would need one
// primitive per distinct length, or masking it cannot do), and its
// workspace layout is opaque, while the backward here reads the graph's own
// saved gates [T,N,G] and cells [T,N,H]. Products go to oneDNN matmuls built
// once, bound once to fixed buffers:
//  forward   P[N*T,G] = x[N*T,I] w_ih^T (one product for every step), then
//            the recurrence: Q[N,G] = h[N,H] w_hh^T and the gate loop (SIMD,
//            sigmoid/tanh from simd_math's vexp) per step. H <= 128: each
//            sample runs all its steps on one thread, kRowGroup samples
//            interleaved (their row products against w_hh^T share the
//            weights' loads: row_products.hpp; groups split across the team); larger H: per step one
//            oneDNN product over the batch, then the gate loop per sample.
//  backward  per step t = T-1..0: the gate loop writes dgates of step t
//            into D[N,G] and into dA[N*T,G] (row n*T+t), then
//            R[N,H] = D w_hh (the recurrent dh; per sample or per step as
//            in the forward); at the end
//            dx = dA w_ih, dw_ih = dA^T x, dw_hh = dA^T hprev (hprev: y
//            shifted one step, zeros at t = 0) and db = column sums of dA
//            (rows in order). Every product has fixed shapes and the sums
//            a fixed order: the same answer every run.
// Scratch: [shared matmul scratchpad][the buffers above].
#include "ops/lstm/cpu.hpp"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/bf16_simd.hpp"
#include "kernels/cpu/dnnl_util.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/row_products.hpp"
#include "kernels/cpu/simd_math.hpp"

namespace memfit::kernels::cpu {
namespace {

using simd::Mask;
using simd::V;

using Mm = StridedMatmul;  // kernels/cpu/dnnl_util.hpp

inline V vsigmoid(V x) { return simd::set1(1.0f) / (simd::set1(1.0f) + simd::vexp(simd::zero() - x)); }
// tanh x = 2 sigmoid(2x) - 1 (absolute error a few f32 ulps of 1).
inline V vtanh(V x) { return simd::set1(2.0f) / (simd::set1(1.0f) + simd::vexp(simd::set1(-2.0f) * x)) - simd::set1(1.0f); }

// Up to this many hidden features, each sample runs its whole recurrence on
// one thread (samples split across the team, one parallel region per call):
// its per-step product is a [1,H] x [H,4H] row product against a w_hh that
// stays in the core's cache (<= 256 KiB). Beyond it, one oneDNN product per
// step over the batch. The per-sample path forks no team per step: on a
// loaded machine a 2-thread team per step (2 T regions, each waiting for a
// descheduled thread) made a step 100x slower.
constexpr int64_t kPerSampleMaxH = 128;
bool per_sample(int64_t H) { return H <= kPerSampleMaxH; }

float* at(void* base, size_t off) { return reinterpret_cast<float*>(static_cast<std::byte*>(base) + off); }


class LstmFwd final : public Kernel {
 public:
  explicit LstmFwd(const LstmParams& p) : p_(p) {
    const int64_t N = p.N, T = p.T, I = p.I, H = p.H, G = 4 * H;
    mx_.make({N * T, I}, {I, 1}, {I, G}, {1, I}, N * T, G, I);
    mh_.make({N, H}, {H, 1}, {H, G}, {1, H}, N, G, H);
    ScratchLayout l;
    l.add(std::max(mx_.scratchpad(), mh_.scratchpad()));
    off_p_ = l.add(size_t(N * T * G) * 4);
    off_q_ = l.add(size_t(N * G) * 4);
    off_h_ = l.add(size_t(N * H) * 4);
    off_c_ = l.add(size_t(N * H) * 4);
    off_b_ = l.add(size_t(G) * 4);
    per_sample_ = per_sample(H);
    off_wt_ = per_sample_ ? l.add(size_t(G * H) * 4) : 0;
    total_ = l.total();
  }
  const char* name() const override { return "cpu.lstm"; }
  size_t scratch_bytes() const override { return total_; }
  size_t heap_bytes() const override { return std::max(mx_.heap, mh_.heap); }
  void run(const StepContext&) override {
    const int64_t N = p_.N, T = p_.T, H = p_.H, G = 4 * H;
    const float *bih = in<float>(3), *bhh = in<float>(4);
    float *h = at(scratch_, off_h_), *c = at(scratch_, off_c_), *bs = at(scratch_, off_b_);
    for (int64_t r = 0; r < G; ++r) bs[r] = bih[r] + bhh[r];
    std::memset(h, 0, size_t(N * H) * 4);
    std::memset(c, 0, size_t(N * H) * 4);
    mx_.call.run();
    if (per_sample_) {
      // w_hh^T [H,G], so that a sample's recurrent product reads rows.
      const float* whh = in<float>(2);
      float* wt = at(scratch_, off_wt_);
      for (int64_t r = 0; r < G; ++r)
        for (int64_t k = 0; k < H; ++k) wt[k * G + r] = whh[r * H + k];
      // A sample's q is its recurrent product (a sample past its length
      // gets one too, which its steps never read).
      parallel_for(row_groups(N), N * T * G * H, [&](int64_t grp) {
        const float* hs[kRowGroup];
        float* qs[kRowGroup];
        int64_t ns[kRowGroup];
        for (int s = 0; s < kRowGroup; ++s) {
          ns[s] = group_row(grp, s, N);
          hs[s] = h + ns[s] * H;
          qs[s] = at(scratch_, off_q_) + ns[s] * G;
        }
        for (int64_t t = 0; t < T; ++t) {
          if (t > 0) rows_times(hs, H, wt, G, qs);
          for (int s = 0; s < kRowGroup; ++s)
            if (first_of_row(ns, s)) step_row(ns[s], t);
        }
      });
    } else {
      for (int64_t t = 0; t < T; ++t) {
        if (t > 0) mh_.call.run();
        parallel_for(N, N * G * 8, [&](int64_t n) { step_row(n, t); });
      }
    }
    std::memcpy(out<float>(1), h, size_t(N * H) * 4);
    std::memcpy(out<float>(2), c, size_t(N * H) * 4);
  }

  // Step t of sample n: the gates from P, the biases and (t > 0) Q; the
  // state, y, gates and cells of the step.
  void step_row(int64_t n, int64_t t) {
    const int64_t N = p_.N, T = p_.T, H = p_.H, G = 4 * H;
    const int32_t* len = p_.lengths ? in<int32_t>(5) : nullptr;
    float *y = out<float>(0), *gates = out<float>(3), *cells = out<float>(4);
    const float *P = at(scratch_, off_p_), *Q = at(scratch_, off_q_), *bs = at(scratch_, off_b_);
    float *h = at(scratch_, off_h_), *c = at(scratch_, off_c_);
    float* gt = gates + (t * N + n) * G;
    float* ct = cells + (t * N + n) * H;
    float* yt = y + (n * T + t) * H;
    if (t >= lstm_steps(len, n, T)) {
      std::memset(gt, 0, size_t(G) * 4);
      std::memset(ct, 0, size_t(H) * 4);
      std::memset(yt, 0, size_t(H) * 4);
      return;
    }
    const float* pr = P + (n * T + t) * G;
    const float* qr = Q + n * G;
    float* hn = h + n * H;
    float* cn = c + n * H;
    const bool rec = t > 0;
    simd::for_row(H, [&](int64_t j, Mask m) {
      auto pre = [&](int64_t k) {
        V a = simd::load(pr + k * H + j, m) + simd::load(bs + k * H + j, m);
        return rec ? a + simd::load(qr + k * H + j, m) : a;
      };
      const V i = vsigmoid(pre(0)), f = vsigmoid(pre(1)), g = vtanh(pre(2)), o = vsigmoid(pre(3));
      const V cv = f * simd::load(cn + j, m) + i * g;
      const V hv = o * vtanh(cv);
      simd::store(gt + j, i, m);
      simd::store(gt + H + j, f, m);
      simd::store(gt + 2 * H + j, g, m);
      simd::store(gt + 3 * H + j, o, m);
      simd::store(ct + j, cv, m);
      simd::store(cn + j, cv, m);
      simd::store(yt + j, hv, m);
      simd::store(hn + j, hv, m);
    });
  }

 private:
  void on_bind() override {
    mx_.bind(in_[0], in_[1], at(scratch_, off_p_), scratch_);
    mh_.bind(at(scratch_, off_h_), in_[2], at(scratch_, off_q_), scratch_);
  }
  LstmParams p_;
  Mm mx_, mh_;
  bool per_sample_ = false;
  size_t off_p_ = 0, off_q_ = 0, off_h_ = 0, off_c_ = 0, off_b_ = 0, off_wt_ = 0, total_ = 0;
};

class LstmBwd final : public Kernel {
 public:
  explicit LstmBwd(const LstmParams& p) : p_(p), at_(p) {
    const int64_t N = p.N, T = p.T, I = p.I, H = p.H, G = 4 * H, R = N * T;
    mr_.make({N, G}, {G, 1}, {G, H}, {H, 1}, N, H, G);     // R = D w_hh
    mdx_.make({R, G}, {G, 1}, {G, I}, {I, 1}, R, I, G);    // dx = dA w_ih
    mwi_.make({G, R}, {1, G}, {R, I}, {I, 1}, G, I, R);    // dw_ih = dA^T x
    mwh_.make({G, R}, {1, G}, {R, H}, {H, 1}, G, H, R);    // dw_hh = dA^T hprev
    ScratchLayout l;
    l.add(std::max({mr_.scratchpad(), mdx_.scratchpad(), mwi_.scratchpad(), mwh_.scratchpad()}));
    off_da_ = l.add(size_t(R * G) * 4);
    off_d_ = l.add(size_t(N * G) * 4);
    off_r_ = l.add(size_t(N * H) * 4);
    off_dc_ = l.add(size_t(N * H) * 4);
    off_hp_ = l.add(size_t(R * H) * 4);
    per_sample_ = per_sample(H);
    total_ = l.total();
  }
  const char* name() const override { return "cpu.lstm_bwd"; }
  size_t scratch_bytes() const override { return total_; }
  size_t heap_bytes() const override { return std::max({mr_.heap, mdx_.heap, mwi_.heap, mwh_.heap}); }
  void run(const StepContext&) override {
    const int64_t N = p_.N, T = p_.T, H = p_.H, G = 4 * H;
    const float *y = in<float>(3), *gates = in<float>(4), *cells = in<float>(5);
    const int32_t* len = at_.lengths >= 0 ? in<int32_t>(size_t(at_.lengths)) : nullptr;
    const float* dy = at_.dy >= 0 ? in<float>(size_t(at_.dy)) : nullptr;
    const float* dhl = at_.dh >= 0 ? in<float>(size_t(at_.dh)) : nullptr;
    const float* dcl = at_.dc >= 0 ? in<float>(size_t(at_.dc)) : nullptr;
    float *dA = at(scratch_, off_da_), *D = at(scratch_, off_d_), *Rh = at(scratch_, off_r_), *dc = at(scratch_, off_dc_),
          *hp = at(scratch_, off_hp_);
    if (dcl) std::memcpy(dc, dcl, size_t(N * H) * 4);
    else std::memset(dc, 0, size_t(N * H) * 4);
    // Step t of sample n: its dgates into dA (and D), its dc; its hprev row.
    auto row = [&](int64_t n, int64_t t) {
        float* dar = dA + (n * T + t) * G;
        float* dn = D + n * G;
        float* hpr = hp + (n * T + t) * H;
        if (t > 0) std::memcpy(hpr, y + (n * T + t - 1) * H, size_t(H) * 4);
        else std::memset(hpr, 0, size_t(H) * 4);
        const int64_t L = lstm_steps(len, n, T);
        if (t >= L) {
          std::memset(dar, 0, size_t(G) * 4);
          std::memset(dn, 0, size_t(G) * 4);
          return;
        }
        // The recurrent gradient: dh_last at the sample's last step, else R.
        const float* dhr = t == L - 1 ? (dhl ? dhl + n * H : nullptr) : Rh + n * H;
        const float* dyr = dy ? dy + (n * T + t) * H : nullptr;
        const float* gt = gates + (t * N + n) * G;
        const float* ct = cells + (t * N + n) * H;
        const float* cp = t > 0 ? cells + ((t - 1) * N + n) * H : nullptr;
        float* dcn = dc + n * H;
        const V one = simd::set1(1.0f);
        simd::for_row(H, [&](int64_t j, Mask m) {
          V dh = dhr ? simd::load(dhr + j, m) : simd::zero();
          if (dyr) dh = dh + simd::load(dyr + j, m);
          const V i = simd::load(gt + j, m), f = simd::load(gt + H + j, m), g = simd::load(gt + 2 * H + j, m),
                  o = simd::load(gt + 3 * H + j, m);
          const V tc = vtanh(simd::load(ct + j, m));
          const V dct = simd::load(dcn + j, m) + dh * o * (one - tc * tc);
          const V cprev = cp ? simd::load(cp + j, m) : simd::zero();
          const V di = dct * g * i * (one - i), df = dct * cprev * f * (one - f), dg = dct * i * (one - g * g),
                  dout = dh * tc * o * (one - o);
          simd::store(dcn + j, dct * f, m);
          simd::store(dar + j, di, m);
          simd::store(dar + H + j, df, m);
          simd::store(dar + 2 * H + j, dg, m);
          simd::store(dar + 3 * H + j, dout, m);
        });
        std::memcpy(dn, dar, size_t(G) * 4);
    };
    if (per_sample_) {
      const float* whh = in<float>(2);
      // Each sample's recurrent dh for step t - 1: dgates_t w_hh (past its
      // length the dgates are zeros, and step L - 1 reads dh_last instead).
      parallel_for(row_groups(N), N * T * G * H, [&](int64_t grp) {
        const float* ds[kRowGroup];
        float* rs[kRowGroup];
        int64_t ns[kRowGroup];
        for (int s = 0; s < kRowGroup; ++s) {
          ns[s] = group_row(grp, s, N);
          rs[s] = Rh + ns[s] * H;
        }
        for (int64_t t = T - 1; t >= 0; --t) {
          for (int s = 0; s < kRowGroup; ++s) {
            if (first_of_row(ns, s)) row(ns[s], t);
            ds[s] = dA + (ns[s] * T + t) * G;
          }
          if (t > 0) rows_times(ds, G, whh, H, rs);
        }
      });
    } else {
      for (int64_t t = T - 1; t >= 0; --t) {
        parallel_for(N, N * G * 8, [&](int64_t n) { row(n, t); });
        if (t > 0) mr_.call.run();
      }
    }
    mdx_.call.run();
    mwi_.call.run();
    mwh_.call.run();
    float *dbi = out<float>(3), *dbh = out<float>(4);
    std::fill(dbi, dbi + G, 0.0f);
    for (int64_t r = 0; r < N * T; ++r) {
      const float* row = dA + r * G;
#pragma omp simd
      for (int64_t k = 0; k < G; ++k) dbi[k] += row[k];
    }
    std::memcpy(dbh, dbi, size_t(G) * 4);
  }

 private:
  void on_bind() override {
    mr_.bind(at(scratch_, off_d_), in_[2], at(scratch_, off_r_), scratch_);
    mdx_.bind(at(scratch_, off_da_), in_[1], out_[0], scratch_);
    mwi_.bind(at(scratch_, off_da_), in_[0], out_[1], scratch_);
    mwh_.bind(at(scratch_, off_da_), at(scratch_, off_hp_), out_[2], scratch_);
  }
  LstmParams p_;
  LstmBwdInputs at_;
  Mm mr_, mdx_, mwi_, mwh_;
  bool per_sample_ = false;
  size_t off_da_ = 0, off_d_ = 0, off_r_ = 0, off_dc_ = 0, off_hp_ = 0, total_ = 0;
};

}  // namespace

std::unique_ptr<Kernel> make_lstm(const LstmParams& p) { return try_make<LstmFwd, Kernel>(p); }
std::unique_ptr<Kernel> make_lstm_bwd(const LstmParams& p) { return try_make<LstmBwd, Kernel>(p); }

}  // namespace memfit::kernels::cpu
