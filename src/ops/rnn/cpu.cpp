// Fast CPU Elman RNN and GRU, f32. N batch, T time steps, I input features,
// H hidden features, G gate rows (H, or 3H for the GRU: r, z, n).
//
// As the LSTM's CPU kernels do, products go to oneDNN matmuls built once
// and bound once to fixed buffers:
//  forward   P[N*T,G] = x[N*T,I] w_ih^T (one product for every step), then
//            the recurrence: Q[N,G] = h[N,H] w_hh^T and the cell per step.
//            H <= 128: each sample runs all its steps on one thread (row
//            products against w_hh^T, which stays in the core's cache,
//            kRowGroup samples together: row_products.hpp; groups split
//            across the team); larger H: per step one oneDNN
//            product over the batch, then the cell per sample.
//  backward  per step t = T-1..0 the cell writes the pre-activation
//            gradients of step t into dAi[N*T,G] (row n*T+t; the input
//            side) and dAh (the recurrent side, the same buffer for the
//            Elman cells), and the recurrent dh for step t - 1 is
//            dAh[n*T+t] w_hh (+ dh z for the GRU): per sample, or per step
//            over the batch (dAh's rows of step t copied to D[N,G],
//            R[N,H] = D w_hh) as in the forward; at the end
//            dx = dAi w_ih, dw_ih = dAi^T x, dw_hh = dAh^T hprev (hprev: y
//            shifted one step, zeros at t = 0), db_ih and db_hh the column
//            sums of dAi and dAh (rows in order). Fixed shapes and a fixed
//            summation order: the same answer every run.
// The activations are std::exp and std::tanh, as in the reference.
// Scratch: [shared matmul scratchpad][the buffers above].
#include "ops/rnn/cpu.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/bf16_simd.hpp"
#include "kernels/cpu/dnnl_util.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/row_products.hpp"

namespace memfit::kernels::cpu {
namespace {

using simd::Mask;

using Mm = StridedMatmul;  // kernels/cpu/dnnl_util.hpp

// Up to this many hidden features each sample runs its whole recurrence on
// one thread (as the LSTM's kernels choose, and for the same reasons: w_hh
// stays in the core's cache, and no team forks per step).
constexpr int64_t kPerSampleMaxH = 128;

float* at(void* base, size_t off) { return reinterpret_cast<float*>(static_cast<std::byte*>(base) + off); }
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }


class RnnFwd final : public Kernel {
 public:
  explicit RnnFwd(const RnnParams& p) : p_(p), per_sample_(p.H <= kPerSampleMaxH) {
    const int64_t N = p.N, T = p.T, I = p.I, H = p.H, G = p.G();
    mx_.make({N * T, I}, {I, 1}, {I, G}, {1, I}, N * T, G, I);
    if (!per_sample_) mh_.make({N, H}, {H, 1}, {H, G}, {1, H}, N, G, H);
    ScratchLayout l;
    l.add(std::max(mx_.scratchpad(), per_sample_ ? size_t(0) : mh_.scratchpad()));
    off_p_ = l.add(size_t(N * T * G) * 4);
    off_q_ = l.add(size_t(N * G) * 4);
    off_h_ = l.add(size_t(N * H) * 4);
    off_wt_ = per_sample_ ? l.add(size_t(G * H) * 4) : 0;
    total_ = l.total();
  }
  const char* name() const override { return "cpu.rnn"; }
  size_t scratch_bytes() const override { return total_; }
  size_t heap_bytes() const override { return std::max(mx_.heap, mh_.heap); }
  void run(const StepContext&) override {
    const int64_t N = p_.N, T = p_.T, H = p_.H, G = p_.G();
    float *h = at(scratch_, off_h_), *Q = at(scratch_, off_q_);
    std::memset(h, 0, size_t(N * H) * 4);
    mx_.call.run();
    if (per_sample_) {
      const float* whh = in<float>(2);
      float* wt = at(scratch_, off_wt_);
      for (int64_t r = 0; r < G; ++r)  // w_hh^T [H,G]: a sample's recurrent product reads rows
        for (int64_t k = 0; k < H; ++k) wt[k * G + r] = whh[r * H + k];
      parallel_for(row_groups(N), N * T * G * H, [&](int64_t grp) {
        const float* hs[kRowGroup];
        float* qs[kRowGroup];
        int64_t ns[kRowGroup];
        for (int s = 0; s < kRowGroup; ++s) {
          ns[s] = group_row(grp, s, N);
          hs[s] = h + ns[s] * H;
          qs[s] = Q + ns[s] * G;
        }
        for (int64_t t = 0; t < T; ++t) {
          if (t == 0)
            for (float* q : qs) std::fill(q, q + G, 0.0f);
          else
            rows_times(hs, H, wt, G, qs);
          for (int s = 0; s < kRowGroup; ++s)
            if (first_of_row(ns, s)) cell(ns[s], t);
        }
      });
    } else {
      std::memset(Q, 0, size_t(N * G) * 4);
      for (int64_t t = 0; t < T; ++t) {
        if (t > 0) mh_.call.run();
        parallel_for(N, N * G * 8, [&](int64_t n) { cell(n, t); });
      }
    }
    std::memcpy(out<float>(1), h, size_t(N * H) * 4);
  }

  // Step t of sample n: the state, y (and the GRU's gates) from P, the
  // biases and the recurrent product Q (0 at t = 0).
  void cell(int64_t n, int64_t t) {
    const int64_t N = p_.N, T = p_.T, H = p_.H, G = p_.G();
    const float *bih = in<float>(3), *bhh = in<float>(4);
    const float* pr = at(scratch_, off_p_) + (n * T + t) * G;
    const float* q = at(scratch_, off_q_) + n * G;
    float* hn = at(scratch_, off_h_) + n * H;
    float* yt = out<float>(0) + (n * T + t) * H;
    if (!p_.gru()) {
      const bool tanh = p_.cell == RnnCell::Tanh;
      for (int64_t j = 0; j < H; ++j) {
        const float a = pr[j] + bih[j] + q[j] + bhh[j];
        hn[j] = yt[j] = tanh ? std::tanh(a) : std::max(a, 0.0f);
      }
      return;
    }
    float* gt = out<float>(2) + (t * N + n) * 4 * H;
    for (int64_t j = 0; j < H; ++j) {
      const float r = sigmoid(pr[j] + bih[j] + q[j] + bhh[j]), z = sigmoid(pr[H + j] + bih[H + j] + q[H + j] + bhh[H + j]);
      const float ahn = q[2 * H + j] + bhh[2 * H + j];
      const float c = std::tanh(pr[2 * H + j] + bih[2 * H + j] + r * ahn);
      hn[j] = yt[j] = (1.0f - z) * c + z * hn[j];
      gt[j] = r, gt[H + j] = z, gt[2 * H + j] = c, gt[3 * H + j] = ahn;
    }
  }

 private:
  void on_bind() override {
    mx_.bind(in_[0], in_[1], at(scratch_, off_p_), scratch_);
    if (!per_sample_) mh_.bind(at(scratch_, off_h_), in_[2], at(scratch_, off_q_), scratch_);
  }
  RnnParams p_;
  bool per_sample_;
  Mm mx_, mh_;
  size_t off_p_ = 0, off_q_ = 0, off_h_ = 0, off_wt_ = 0, total_ = 0;
};

class RnnBwd final : public Kernel {
 public:
  explicit RnnBwd(const RnnParams& p) : p_(p), at_(p), per_sample_(p.H <= kPerSampleMaxH) {
    const int64_t N = p.N, T = p.T, I = p.I, H = p.H, G = p.G(), R = N * T;
    mdx_.make({R, G}, {G, 1}, {G, I}, {I, 1}, R, I, G);  // dx = dAi w_ih
    mwi_.make({G, R}, {1, G}, {R, I}, {I, 1}, G, I, R);  // dw_ih = dAi^T x
    mwh_.make({G, R}, {1, G}, {R, H}, {H, 1}, G, H, R);  // dw_hh = dAh^T hprev
    if (!per_sample_) mr_.make({N, G}, {G, 1}, {G, H}, {H, 1}, N, H, G);  // R = D w_hh
    ScratchLayout l;
    l.add(std::max({mdx_.scratchpad(), mwi_.scratchpad(), mwh_.scratchpad(), per_sample_ ? size_t(0) : mr_.scratchpad()}));
    off_dai_ = l.add(size_t(R * G) * 4);
    off_dah_ = p.gru() ? l.add(size_t(R * G) * 4) : off_dai_;
    off_dh_ = l.add(size_t(N * H) * 4);
    off_hp_ = l.add(size_t(R * H) * 4);
    off_d_ = per_sample_ ? 0 : l.add(size_t(N * G) * 4);
    off_r_ = per_sample_ ? 0 : l.add(size_t(N * H) * 4);
    total_ = l.total();
  }
  const char* name() const override { return "cpu.rnn_bwd"; }
  size_t scratch_bytes() const override { return total_; }
  size_t heap_bytes() const override { return std::max({mdx_.heap, mwi_.heap, mwh_.heap, mr_.heap}); }
  void run(const StepContext&) override {
    const int64_t N = p_.N, T = p_.T, H = p_.H, G = p_.G();
    const float* dhl = at_.dh >= 0 ? in<float>(size_t(at_.dh)) : nullptr;
    float *dAi = at(scratch_, off_dai_), *dAh = at(scratch_, off_dah_), *dhs = at(scratch_, off_dh_);
    if (dhl) std::memcpy(dhs, dhl, size_t(N * H) * 4);
    else std::memset(dhs, 0, size_t(N * H) * 4);
    if (per_sample_) {
      const float* whh = in<float>(2);
      parallel_for(row_groups(N), N * T * G * H, [&](int64_t grp) {
        const float* das[kRowGroup];
        float* dh[kRowGroup];
        int64_t ns[kRowGroup];
        for (int s = 0; s < kRowGroup; ++s) {
          ns[s] = group_row(grp, s, N);
          dh[s] = dhs + ns[s] * H;
        }
        for (int64_t t = T - 1; t >= 0; --t) {
          for (int s = 0; s < kRowGroup; ++s) {
            if (first_of_row(ns, s)) row(ns[s], t);
            das[s] = dAh + (ns[s] * T + t) * G;
          }
          if (t > 0) rows_times<true>(das, G, whh, H, dh);
        }
      });
    } else {
      float *D = at(scratch_, off_d_), *Rh = at(scratch_, off_r_);
      for (int64_t t = T - 1; t >= 0; --t) {
        parallel_for(N, N * G * 8, [&](int64_t n) {
          row(n, t);
          std::memcpy(D + n * G, dAh + (n * T + t) * G, size_t(G) * 4);
        });
        if (t == 0) continue;
        mr_.call.run();
        for (int64_t i = 0; i < N * H; ++i) dhs[i] += Rh[i];
      }
    }
    mdx_.call.run();
    mwi_.call.run();
    mwh_.call.run();
    float *dbi = out<float>(3), *dbh = out<float>(4);
    std::fill(dbi, dbi + G, 0.0f);
    std::fill(dbh, dbh + G, 0.0f);
    for (int64_t r = 0; r < N * T; ++r) {
      const float *ri = dAi + r * G, *rh = dAh + r * G;
#pragma omp simd
      for (int64_t k = 0; k < G; ++k) dbi[k] += ri[k], dbh[k] += rh[k];
    }
  }

  // Step t of sample n: its pre-activation gradients into dAi and dAh, its
  // hprev row, and the state's gradient reset to the direct path (dh z for
  // the GRU, 0 for the Elman cells); the product with w_hh adds after.
  void row(int64_t n, int64_t t) {
    const int64_t N = p_.N, T = p_.T, H = p_.H, G = p_.G();
    const float* y = in<float>(3);
    const float* dy = at_.dy >= 0 ? in<float>(size_t(at_.dy)) : nullptr;
    const float* yt = y + (n * T + t) * H;
    float* hpr = at(scratch_, off_hp_) + (n * T + t) * H;
    if (t > 0) std::memcpy(hpr, y + (n * T + t - 1) * H, size_t(H) * 4);
    else std::memset(hpr, 0, size_t(H) * 4);
    const float* dyt = dy ? dy + (n * T + t) * H : nullptr;
    float* dai = at(scratch_, off_dai_) + (n * T + t) * G;
    float* dah = at(scratch_, off_dah_) + (n * T + t) * G;
    float* dh = at(scratch_, off_dh_) + n * H;
    if (!p_.gru()) {
      const bool tanh = p_.cell == RnnCell::Tanh;
      for (int64_t j = 0; j < H; ++j) {
        const float d = dh[j] + (dyt ? dyt[j] : 0.0f);
        dai[j] = tanh ? d * (1.0f - yt[j] * yt[j]) : (yt[j] > 0.0f ? d : 0.0f);
        dh[j] = 0.0f;
      }
      return;
    }
    const float* gt = in<float>(size_t(at_.gates)) + (t * N + n) * 4 * H;
    for (int64_t j = 0; j < H; ++j) {
      const float d = dh[j] + (dyt ? dyt[j] : 0.0f);
      const float r = gt[j], z = gt[H + j], c = gt[2 * H + j], hn = gt[3 * H + j];
      const float dc = d * (1.0f - z) * (1.0f - c * c);
      dai[j] = dah[j] = dc * hn * r * (1.0f - r);
      dai[H + j] = dah[H + j] = d * (hpr[j] - c) * z * (1.0f - z);
      dai[2 * H + j] = dc;
      dah[2 * H + j] = dc * r;
      dh[j] = d * z;
    }
  }

 private:
  void on_bind() override {
    mdx_.bind(at(scratch_, off_dai_), in_[1], out_[0], scratch_);
    mwi_.bind(at(scratch_, off_dai_), in_[0], out_[1], scratch_);
    mwh_.bind(at(scratch_, off_dah_), at(scratch_, off_hp_), out_[2], scratch_);
    if (!per_sample_) mr_.bind(at(scratch_, off_d_), in_[2], at(scratch_, off_r_), scratch_);
  }
  RnnParams p_;
  RnnBwdInputs at_;
  bool per_sample_;
  Mm mdx_, mwi_, mwh_, mr_;
  size_t off_dai_ = 0, off_dah_ = 0, off_dh_ = 0, off_hp_ = 0, off_d_ = 0, off_r_ = 0, total_ = 0;
};

}  // namespace

std::unique_ptr<Kernel> make_rnn(const RnnParams& p) { return try_make<RnnFwd, Kernel>(p); }
std::unique_ptr<Kernel> make_rnn_bwd(const RnnParams& p) { return try_make<RnnBwd, Kernel>(p); }

}  // namespace memfit::kernels::cpu
