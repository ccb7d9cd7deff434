// Scalar reference kernels of the LSTM family (ops/lstm/params.hpp), the
// test oracle. T is float or double for every float operand; lengths are i32.
// N batch, T time steps, I input features, H hidden features, G = 4H.
// Scratch: the state of one sample (forward: h[H], c[H], a[G]; backward:
// dh[H], dc[H], da[G]), so run() allocates nothing. Samples and steps run in
// a fixed order: the result is the same every run.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/kernel.hpp"
#include "ops/lstm/params.hpp"

namespace memfit::kernels::ref {

template <class T>
inline T lstm_sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

template <class E>
class Lstm final : public Kernel {
 public:
  explicit Lstm(LstmParams p) : p_(p) {}
  const char* name() const override { return "ref.lstm"; }
  size_t scratch_bytes() const override { return size_t(6 * p_.H) * sizeof(E); }
  void run(const StepContext&) override {
    const int64_t N = p_.N, T = p_.T, I = p_.I, H = p_.H, G = 4 * H;
    const E *x = in<E>(0), *wih = in<E>(1), *whh = in<E>(2), *bih = in<E>(3), *bhh = in<E>(4);
    const int32_t* len = p_.lengths ? in<int32_t>(5) : nullptr;
    E *y = out<E>(0), *hl = out<E>(1), *cl = out<E>(2), *gates = out<E>(3), *cells = out<E>(4);
    E* h = static_cast<E*>(scratch_);
    E* c = h + H;
    E* a = c + H;
    std::fill(y, y + N * T * H, E(0));
    std::fill(gates, gates + T * N * G, E(0));
    std::fill(cells, cells + T * N * H, E(0));
    for (int64_t n = 0; n < N; ++n) {
      std::fill(h, h + 2 * H, E(0));
      const int64_t L = lstm_steps(len, n, T);
      for (int64_t t = 0; t < L; ++t) {
        const E* xt = x + (n * T + t) * I;
        for (int64_t r = 0; r < G; ++r) {
          E s = bih[r] + bhh[r];
          for (int64_t k = 0; k < I; ++k) s += wih[r * I + k] * xt[k];
          for (int64_t k = 0; k < H; ++k) s += whh[r * H + k] * h[k];
          a[r] = s;
        }
        E* gt = gates + (t * N + n) * G;
        E* ct = cells + (t * N + n) * H;
        E* yt = y + (n * T + t) * H;
        for (int64_t j = 0; j < H; ++j) {
          const E i = lstm_sigmoid(a[j]), f = lstm_sigmoid(a[H + j]), g = std::tanh(a[2 * H + j]),
                  o = lstm_sigmoid(a[3 * H + j]);
          c[j] = f * c[j] + i * g;
          h[j] = o * std::tanh(c[j]);
          gt[j] = i, gt[H + j] = f, gt[2 * H + j] = g, gt[3 * H + j] = o;
          ct[j] = c[j];
          yt[j] = h[j];
        }
      }
      std::copy(h, h + H, hl + n * H);
      std::copy(c, c + H, cl + n * H);
    }
  }

 private:
  LstmParams p_;
};

template <class E>
class LstmBwd final : public Kernel {
 public:
  explicit LstmBwd(LstmParams p) : p_(p), at_(p) {}
  const char* name() const override { return "ref.lstm_bwd"; }
  size_t scratch_bytes() const override { return size_t(6 * p_.H) * sizeof(E); }
  void run(const StepContext&) override {
    const int64_t N = p_.N, T = p_.T, I = p_.I, H = p_.H, G = 4 * H;
    const E *x = in<E>(0), *wih = in<E>(1), *whh = in<E>(2), *y = in<E>(3), *gates = in<E>(4), *cells = in<E>(5);
    const int32_t* len = at_.lengths >= 0 ? in<int32_t>(size_t(at_.lengths)) : nullptr;
    const E* dy = at_.dy >= 0 ? in<E>(size_t(at_.dy)) : nullptr;
    const E* dhl = at_.dh >= 0 ? in<E>(size_t(at_.dh)) : nullptr;
    const E* dcl = at_.dc >= 0 ? in<E>(size_t(at_.dc)) : nullptr;
    E *dx = out<E>(0), *dwih = out<E>(1), *dwhh = out<E>(2), *dbih = out<E>(3), *dbhh = out<E>(4);
    E* dh = static_cast<E*>(scratch_);
    E* dc = dh + H;
    E* da = dc + H;
    std::fill(dx, dx + N * T * I, E(0));
    std::fill(dwih, dwih + G * I, E(0));
    std::fill(dwhh, dwhh + G * H, E(0));
    std::fill(dbih, dbih + G, E(0));
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t j = 0; j < H; ++j) {
        dh[j] = dhl ? dhl[n * H + j] : E(0);
        dc[j] = dcl ? dcl[n * H + j] : E(0);
      }
      const int64_t L = lstm_steps(len, n, T);
      for (int64_t t = L - 1; t >= 0; --t) {
        const E* gt = gates + (t * N + n) * G;
        const E* ct = cells + (t * N + n) * H;
        const E* cp = t > 0 ? cells + ((t - 1) * N + n) * H : nullptr;
        const E* hp = t > 0 ? y + (n * T + t - 1) * H : nullptr;
        for (int64_t j = 0; j < H; ++j) {
          const E i = gt[j], f = gt[H + j], g = gt[2 * H + j], o = gt[3 * H + j];
          const E dht = dh[j] + (dy ? dy[(n * T + t) * H + j] : E(0));
          const E tc = std::tanh(ct[j]);
          const E dct = dc[j] + dht * o * (E(1) - tc * tc);
          const E c_prev = cp ? cp[j] : E(0);
          da[j] = dct * g * i * (E(1) - i);
          da[H + j] = dct * c_prev * f * (E(1) - f);
          da[2 * H + j] = dct * i * (E(1) - g * g);
          da[3 * H + j] = dht * tc * o * (E(1) - o);
          dc[j] = dct * f;
        }
        const E* xt = x + (n * T + t) * I;
        E* dxt = dx + (n * T + t) * I;
        for (int64_t r = 0; r < G; ++r) {
          const E d = da[r];
          dbih[r] += d;
          for (int64_t k = 0; k < I; ++k) {
            dwih[r * I + k] += d * xt[k];
            dxt[k] += d * wih[r * I + k];
          }
          if (hp)
            for (int64_t k = 0; k < H; ++k) dwhh[r * H + k] += d * hp[k];
        }
        for (int64_t k = 0; k < H; ++k) {
          E s = 0;
          for (int64_t r = 0; r < G; ++r) s += da[r] * whh[r * H + k];
          dh[k] = s;
        }
      }
    }
    std::copy(dbih, dbih + G, dbhh);
  }

 private:
  LstmParams p_;
  LstmBwdInputs at_;
};

}  // namespace memfit::kernels::ref
