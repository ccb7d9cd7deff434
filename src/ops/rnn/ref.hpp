// Scalar reference kernels of the RNN family (ops/rnn/params.hpp), the test
// oracle. E is float or double for every operand.
// N batch, T time steps, I input features, H hidden features, G gate rows.
// Scratch: the state of one sample (forward: h[H], ai[G], ah[G]; backward:
// dh[H], dai[G], dah[G]), so run() allocates nothing. Samples and steps run
// in a fixed order: the result is the same every run.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/kernel.hpp"
#include "ops/rnn/params.hpp"

namespace memfit::kernels::ref {

template <class E>
inline E rnn_sigmoid(E x) {
  return E(1) / (E(1) + std::exp(-x));
}

template <class E>
class Rnn final : public Kernel {
 public:
  explicit Rnn(RnnParams p) : p_(p) {}
  const char* name() const override { return "ref.rnn"; }
  size_t scratch_bytes() const override { return size_t(p_.H + 2 * p_.G()) * sizeof(E); }
  void run(const StepContext&) override {
    const int64_t N = p_.N, T = p_.T, I = p_.I, H = p_.H, G = p_.G();
    const E *x = in<E>(0), *wih = in<E>(1), *whh = in<E>(2), *bih = in<E>(3), *bhh = in<E>(4);
    E *y = out<E>(0), *hl = out<E>(1);
    E* gates = p_.gru() ? out<E>(2) : nullptr;
    E* h = static_cast<E*>(scratch_);
    E* ai = h + H;
    E* ah = ai + G;
    for (int64_t n = 0; n < N; ++n) {
      std::fill(h, h + H, E(0));
      for (int64_t t = 0; t < T; ++t) {
        const E* xt = x + (n * T + t) * I;
        for (int64_t r = 0; r < G; ++r) {
          E si = bih[r], sh = bhh[r];
          for (int64_t k = 0; k < I; ++k) si += wih[r * I + k] * xt[k];
          for (int64_t k = 0; k < H; ++k) sh += whh[r * H + k] * h[k];
          ai[r] = si, ah[r] = sh;
        }
        E* yt = y + (n * T + t) * H;
        if (!p_.gru()) {
          for (int64_t j = 0; j < H; ++j) {
            const E a = ai[j] + ah[j];
            h[j] = p_.cell == RnnCell::Tanh ? std::tanh(a) : std::max(a, E(0));
            yt[j] = h[j];
          }
          continue;
        }
        E* gt = gates + (t * N + n) * 4 * H;
        for (int64_t j = 0; j < H; ++j) {
          const E r = rnn_sigmoid(ai[j] + ah[j]), z = rnn_sigmoid(ai[H + j] + ah[H + j]);
          const E c = std::tanh(ai[2 * H + j] + r * ah[2 * H + j]);
          h[j] = (E(1) - z) * c + z * h[j];
          gt[j] = r, gt[H + j] = z, gt[2 * H + j] = c, gt[3 * H + j] = ah[2 * H + j];
          yt[j] = h[j];
        }
      }
      std::copy(h, h + H, hl + n * H);
    }
  }

 private:
  RnnParams p_;
};

template <class E>
class RnnBwd final : public Kernel {
 public:
  explicit RnnBwd(RnnParams p) : p_(p), at_(p) {}
  const char* name() const override { return "ref.rnn_bwd"; }
  size_t scratch_bytes() const override { return size_t(p_.H + 2 * p_.G()) * sizeof(E); }
  void run(const StepContext&) override {
    const int64_t N = p_.N, T = p_.T, I = p_.I, H = p_.H, G = p_.G();
    const E *x = in<E>(0), *wih = in<E>(1), *whh = in<E>(2), *y = in<E>(3);
    const E* gates = at_.gates >= 0 ? in<E>(size_t(at_.gates)) : nullptr;
    const E* dy = at_.dy >= 0 ? in<E>(size_t(at_.dy)) : nullptr;
    const E* dhl = at_.dh >= 0 ? in<E>(size_t(at_.dh)) : nullptr;
    E *dx = out<E>(0), *dwih = out<E>(1), *dwhh = out<E>(2), *dbih = out<E>(3), *dbhh = out<E>(4);
    E* dh = static_cast<E*>(scratch_);
    E* dai = dh + H;
    E* dah = dai + G;
    std::fill(dx, dx + N * T * I, E(0));
    std::fill(dwih, dwih + G * I, E(0));
    std::fill(dwhh, dwhh + G * H, E(0));
    std::fill(dbih, dbih + G, E(0));
    std::fill(dbhh, dbhh + G, E(0));
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t j = 0; j < H; ++j) dh[j] = dhl ? dhl[n * H + j] : E(0);
      for (int64_t t = T - 1; t >= 0; --t) {
        const E* yt = y + (n * T + t) * H;
        const E* hp = t > 0 ? y + (n * T + t - 1) * H : nullptr;
        for (int64_t j = 0; j < H; ++j) {
          const E d = dh[j] + (dy ? dy[(n * T + t) * H + j] : E(0));
          if (!p_.gru()) {
            const E da = p_.cell == RnnCell::Tanh ? d * (E(1) - yt[j] * yt[j]) : (yt[j] > E(0) ? d : E(0));
            dai[j] = dah[j] = da;
            dh[j] = 0;
            continue;
          }
          const E* gt = gates + (t * N + n) * 4 * H;
          const E r = gt[j], z = gt[H + j], c = gt[2 * H + j], hn = gt[3 * H + j];
          const E h_prev = hp ? hp[j] : E(0);
          const E dc = d * (E(1) - z) * (E(1) - c * c);
          const E dr = dc * hn * r * (E(1) - r);
          const E dz = d * (h_prev - c) * z * (E(1) - z);
          dai[j] = dah[j] = dr;
          dai[H + j] = dah[H + j] = dz;
          dai[2 * H + j] = dc;
          dah[2 * H + j] = dc * r;
          dh[j] = d * z;  // the direct path; the products add below
        }
        const E* xt = x + (n * T + t) * I;
        E* dxt = dx + (n * T + t) * I;
        for (int64_t r = 0; r < G; ++r) {
          dbih[r] += dai[r];
          dbhh[r] += dah[r];
          for (int64_t k = 0; k < I; ++k) {
            dwih[r * I + k] += dai[r] * xt[k];
            dxt[k] += dai[r] * wih[r * I + k];
          }
          if (hp)
            for (int64_t k = 0; k < H; ++k) dwhh[r * H + k] += dah[r] * hp[k];
        }
        for (int64_t k = 0; k < H; ++k) {
          E s = 0;
          for (int64_t r = 0; r < G; ++r) s += dah[r] * whh[r * H + k];
          dh[k] += s;
        }
      }
    }
  }

 private:
  RnnParams p_;
  RnnBwdInputs at_;
};

}  // namespace memfit::kernels::ref
