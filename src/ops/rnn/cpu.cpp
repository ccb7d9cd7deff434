// Fast CPU Elman RNN and GRU, f32. N batch, T time steps, I input features,
// H hidden features, G gate rows (H, or 3H for the GRU: r, z, n).
//
// As the LSTM's CPU kernels do, products go to oneDNN matmuls built once
// and bound once to fixed buffers, and the recurrence runs per sample:
//  forward   P[N*T,G] = x[N*T,I] w_ih^T (one product for every step); then
//            each sample runs all its steps on one thread (samples split
//            across the team): its recurrent row Q[n] = h w_hh^T (a row
//            product against w_hh^T, which stays in the core's cache at
//            these sizes) and the cell.
//  backward  each sample back through time on one thread: the cell writes
//            the pre-activation gradients of step t into dAi[N*T,G] (row
//            n*T+t; for the input side) and dAh (the recurrent side, the
//            same buffer for the Elman cells), and the recurrent dh for
//            step t - 1 is dAh[n*T+t] w_hh (+ dh z for the GRU); at the end
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

namespace memfit::kernels::cpu {
namespace {

using simd::Mask;

// One f32 matmul c[M,N] = a[M,K] b[K,N] with operands described by strides.
struct Mm {
  dnnl::memory::desc a, b, c;
  dnnl::matmul::primitive_desc pd;
  Call call;
  size_t heap = 0;
  void make(dims ad, dims as, dims bd, dims bs, int64_t M, int64_t N, int64_t K) {
    a = strided_f32(ad, as);
    b = strided_f32(bd, bs);
    c = plain_f32({M, N});
    dnnl::matmul::desc desc(a, b, c);
    pd = {desc, user_scratchpad_attr(), engine()};
    call.set(dnnl::matmul(pd));
    heap = matmul_heap_bytes(pd, M, N, K);
  }
  size_t scratchpad() const { return scratchpad_bytes(pd); }
  void bind(const void* pa, const void* pb, void* pc, void* scratch) {
    call.clear_args();
    call.arg(DNNL_ARG_SRC, a, const_cast<void*>(pa));
    call.arg(DNNL_ARG_WEIGHTS, b, const_cast<void*>(pb));
    call.arg(DNNL_ARG_DST, c, pc);
    call.arg(DNNL_ARG_SCRATCHPAD, pd.scratchpad_desc(), scratch);
  }
};

float* at(void* base, size_t off) { return reinterpret_cast<float*>(static_cast<std::byte*>(base) + off); }
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// acc[0..len) += s * w[0..len)
inline void axpy(float* acc, float s, const float* w, int64_t len) {
  const simd::V sv = simd::set1(s);
  simd::for_row(len, [&](int64_t j, Mask m) { simd::store(acc + j, simd::fmadd(sv, simd::load(w + j, m), simd::load(acc + j, m)), m); });
}

class RnnFwd final : public Kernel {
 public:
  explicit RnnFwd(const RnnParams& p) : p_(p) {
    const int64_t N = p.N, T = p.T, I = p.I, H = p.H, G = p.G();
    mx_.make({N * T, I}, {I, 1}, {I, G}, {1, I}, N * T, G, I);
    ScratchLayout l;
    l.add(mx_.scratchpad());
    off_p_ = l.add(size_t(N * T * G) * 4);
    off_q_ = l.add(size_t(N * G) * 4);
    off_h_ = l.add(size_t(N * H) * 4);
    off_wt_ = l.add(size_t(G * H) * 4);
    total_ = l.total();
  }
  const char* name() const override { return "cpu.rnn"; }
  size_t scratch_bytes() const override { return total_; }
  size_t heap_bytes() const override { return mx_.heap; }
  void run(const StepContext&) override {
    const int64_t N = p_.N, T = p_.T, H = p_.H, G = p_.G();
    const float *whh = in<float>(2), *bih = in<float>(3), *bhh = in<float>(4);
    float* y = out<float>(0);
    float* gates = p_.gru() ? out<float>(2) : nullptr;
    float *P = at(scratch_, off_p_), *h = at(scratch_, off_h_), *wt = at(scratch_, off_wt_);
    mx_.call.run();
    for (int64_t r = 0; r < G; ++r)  // w_hh^T [H,G]: a sample's recurrent product reads rows
      for (int64_t k = 0; k < H; ++k) wt[k * G + r] = whh[r * H + k];
    parallel_for(N, N * T * G * H, [&](int64_t n) {
      float* q = at(scratch_, off_q_) + n * G;
      float* hn = h + n * H;
      std::fill(hn, hn + H, 0.0f);
      for (int64_t t = 0; t < T; ++t) {
        std::copy(bhh, bhh + G, q);
        if (t > 0)
          for (int64_t k = 0; k < H; ++k) axpy(q, hn[k], wt + k * G, G);
        const float* pr = P + (n * T + t) * G;
        float* yt = y + (n * T + t) * H;
        if (!p_.gru()) {
          const bool tanh = p_.cell == RnnCell::Tanh;
          for (int64_t j = 0; j < H; ++j) {
            const float a = pr[j] + bih[j] + q[j];
            hn[j] = yt[j] = tanh ? std::tanh(a) : std::max(a, 0.0f);
          }
          continue;
        }
        float* gt = gates + (t * N + n) * 4 * H;
        for (int64_t j = 0; j < H; ++j) {
          const float r = sigmoid(pr[j] + bih[j] + q[j]), z = sigmoid(pr[H + j] + bih[H + j] + q[H + j]);
          const float c = std::tanh(pr[2 * H + j] + bih[2 * H + j] + r * q[2 * H + j]);
          hn[j] = yt[j] = (1.0f - z) * c + z * hn[j];
          gt[j] = r, gt[H + j] = z, gt[2 * H + j] = c, gt[3 * H + j] = q[2 * H + j];
        }
      }
    });
    std::memcpy(out<float>(1), h, size_t(N * H) * 4);
  }

 private:
  void on_bind() override { mx_.bind(in_[0], in_[1], at(scratch_, off_p_), scratch_); }
  RnnParams p_;
  Mm mx_;
  size_t off_p_ = 0, off_q_ = 0, off_h_ = 0, off_wt_ = 0, total_ = 0;
};

class RnnBwd final : public Kernel {
 public:
  explicit RnnBwd(const RnnParams& p) : p_(p), at_(p) {
    const int64_t N = p.N, T = p.T, I = p.I, H = p.H, G = p.G(), R = N * T;
    mdx_.make({R, G}, {G, 1}, {G, I}, {I, 1}, R, I, G);  // dx = dAi w_ih
    mwi_.make({G, R}, {1, G}, {R, I}, {I, 1}, G, I, R);  // dw_ih = dAi^T x
    mwh_.make({G, R}, {1, G}, {R, H}, {H, 1}, G, H, R);  // dw_hh = dAh^T hprev
    ScratchLayout l;
    l.add(std::max({mdx_.scratchpad(), mwi_.scratchpad(), mwh_.scratchpad()}));
    off_dai_ = l.add(size_t(R * G) * 4);
    off_dah_ = p.gru() ? l.add(size_t(R * G) * 4) : off_dai_;
    off_dh_ = l.add(size_t(N * H) * 4);
    off_hp_ = l.add(size_t(R * H) * 4);
    total_ = l.total();
  }
  const char* name() const override { return "cpu.rnn_bwd"; }
  size_t scratch_bytes() const override { return total_; }
  size_t heap_bytes() const override { return std::max({mdx_.heap, mwi_.heap, mwh_.heap}); }
  void run(const StepContext&) override {
    const int64_t N = p_.N, T = p_.T, H = p_.H, G = p_.G();
    const float *whh = in<float>(2), *y = in<float>(3);
    const float* gates = at_.gates >= 0 ? in<float>(size_t(at_.gates)) : nullptr;
    const float* dy = at_.dy >= 0 ? in<float>(size_t(at_.dy)) : nullptr;
    const float* dhl = at_.dh >= 0 ? in<float>(size_t(at_.dh)) : nullptr;
    float *dAi = at(scratch_, off_dai_), *dAh = at(scratch_, off_dah_), *dhs = at(scratch_, off_dh_),
          *hp = at(scratch_, off_hp_);
    parallel_for(N, N * T * G * H, [&](int64_t n) {
      float* dh = dhs + n * H;
      if (dhl) std::memcpy(dh, dhl + n * H, size_t(H) * 4);
      else std::fill(dh, dh + H, 0.0f);
      for (int64_t t = T - 1; t >= 0; --t) {
        const float* yt = y + (n * T + t) * H;
        float* hpr = hp + (n * T + t) * H;
        if (t > 0) std::memcpy(hpr, y + (n * T + t - 1) * H, size_t(H) * 4);
        else std::memset(hpr, 0, size_t(H) * 4);
        const float* dyt = dy ? dy + (n * T + t) * H : nullptr;
        float* dai = dAi + (n * T + t) * G;
        float* dah = dAh + (n * T + t) * G;
        for (int64_t j = 0; j < H; ++j) {
          const float d = dh[j] + (dyt ? dyt[j] : 0.0f);
          if (!p_.gru()) {
            dai[j] = p_.cell == RnnCell::Tanh ? d * (1.0f - yt[j] * yt[j]) : (yt[j] > 0.0f ? d : 0.0f);
            dh[j] = 0.0f;
            continue;
          }
          const float* gt = gates + (t * N + n) * 4 * H;
          const float r = gt[j], z = gt[H + j], c = gt[2 * H + j], hn = gt[3 * H + j];
          const float dc = d * (1.0f - z) * (1.0f - c * c);
          dai[j] = dah[j] = dc * hn * r * (1.0f - r);
          dai[H + j] = dah[H + j] = d * (hpr[j] - c) * z * (1.0f - z);
          dai[2 * H + j] = dc;
          dah[2 * H + j] = dc * r;
          dh[j] = d * z;
        }
        if (t > 0)
          for (int64_t k = 0; k < G; ++k) axpy(dh, dah[k], whh + k * H, H);
      }
    });
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

 private:
  void on_bind() override {
    mdx_.bind(at(scratch_, off_dai_), in_[1], out_[0], scratch_);
    mwi_.bind(at(scratch_, off_dai_), in_[0], out_[1], scratch_);
    mwh_.bind(at(scratch_, off_dah_), at(scratch_, off_hp_), out_[2], scratch_);
  }
  RnnParams p_;
  RnnBwdInputs at_;
  Mm mdx_, mwi_, mwh_;
  size_t off_dai_ = 0, off_dah_ = 0, off_dh_ = 0, off_hp_ = 0, total_ = 0;
};

}  // namespace

std::unique_ptr<Kernel> make_rnn(const RnnParams& p) { return try_make<RnnFwd, Kernel>(p); }
std::unique_ptr<Kernel> make_rnn_bwd(const RnnParams& p) { return try_make<RnnBwd, Kernel>(p); }

}  // namespace memfit::kernels::cpu
