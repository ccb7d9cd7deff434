// Scalar reference kernels for dropout with a counter-based mask (the test
// oracle). T is float or double. The mask is a pure function of
// (ctx.seed, stream, ctx.step, element index), see ops/dropout/params.hpp
// (DropoutParams), so forward, backward and tests/golden/make_golden.py agree
// without storing any generator state.
//
// The keep test compares in f32, uniform01(key, i) >= float(p), and kept values
// are scaled by 1/(1 - p) computed in T, as the golden script does with
// float32 (for T = float the masks and outputs match it bitwise).
#pragma once

#include <cstdint>

#include "kernels/kernel.hpp"
#include "memfit/rng.hpp"
#include "ops/dropout/params.hpp"

namespace memfit::kernels::ref {

// in: x   out: y, mask[n] (u8: 1 kept). y may be x's buffer (in place).
template <class T>
class Dropout final : public Kernel {
 public:
  explicit Dropout(DropoutParams p) : p_(p) {}
  const char* name() const override { return "ref.dropout"; }
  void run(const StepContext& ctx) override {
    const T* x = in<T>(0);
    T* y = out<T>(0);
    uint8_t* mask = out<uint8_t>(1);
    // A micro-batch holds rows row0.. of the global batch: offset the element
    // index so the masks equal the whole batch's.
    const DropoutDraw draw = dropout_draw(p_, ctx.seed, ctx.step, ctx.row0);
    const uint64_t key = draw.key, base = draw.base;  // not a structured binding: clang 14 cannot capture one in a lambda
    const float pf = static_cast<float>(p_.p);
    const T scale = T(1) / (T(1) - static_cast<T>(p_.p));
    for (int64_t i = 0; i < p_.n; ++i) {
      const bool keep = rng::uniform01(key, base + static_cast<uint64_t>(i)) >= pf;
      mask[i] = keep ? 1 : 0;
      y[i] = keep ? x[i] * scale : T(0);
    }
  }

 private:
  DropoutParams p_;
};

// in: dy, mask   out: dx = mask ? dy / (1 - p) : 0. dx may be dy's buffer.
template <class T>
class DropoutBwd final : public Kernel {
 public:
  explicit DropoutBwd(DropoutParams p) : p_(p) {}
  const char* name() const override { return "ref.dropout_bwd"; }
  void run(const StepContext&) override {
    const T* dy = in<T>(0);
    const uint8_t* mask = in<uint8_t>(1);
    T* dx = out<T>(0);
    const T scale = T(1) / (T(1) - static_cast<T>(p_.p));
    for (int64_t i = 0; i < p_.n; ++i) dx[i] = mask[i] ? dy[i] * scale : T(0);
  }

 private:
  DropoutParams p_;
};

}  // namespace memfit::kernels::ref
