// n elements, any shape; chunks of 4096 elements split across threads, 16
// lanes at a time (masked tail), f32 arithmetic for both storage types. The
// formulas are ops/activation/params.hpp's; the logistic ones are written
// from e = exp(-|.|) or exp(-x) with its argument clamped at 88, so that
// nothing overflows to inf/inf and nothing cancels:
//   s(x) = 1 / (1 + e), s(-x) = e / (1 + e), e = exp(-x);
//   tanh |x| = -m / (2 + m), m = expm1(-2|x|) (exact near 0), sign restored;
//   tanh' = 4 e / (1 + e)^2, e = exp(-2|x|).
#include "ops/activation/cpu.hpp"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/bf16_simd.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/simd_math.hpp"

namespace memfit::kernels::cpu {
namespace {

using simd::Mask;
using simd::V;
using simd::math::P;
using simd::math::select;
using simd::math::splat;

// e = exp(-x), -x clamped at 88 (e finite).
inline P exp_neg(P x) {
  const P a = splat(0.0f) - x;
  return simd::math::exp_p(select(a > splat(88.0f), splat(88.0f), a));
}
inline P clamp(P x, P lo, P hi) { return select(x < lo, lo, select(x > hi, hi, x)); }
// sqrt of each lane (the compiler's vector square root, correctly rounded).
inline P sqrt_p(P x) {
  P r;
  for (size_t i = 0; i < sizeof(P) / sizeof(float); ++i) r[i] = __builtin_sqrtf(x[i]);
  return r;
}
// |mag| with the sign of `from`.
inline P copy_sign(P mag, P from) {
  using simd::math::PI;
  return (P)(((PI)mag & 0x7fffffff) | ((PI)from & INT32_MIN));
}

// f(x) of each kind, on one vector part.
inline P value(const ActivationParams& p, float a, float b, P x) {
  const P one = splat(1.0f), zero = splat(0.0f);
  switch (p.kind) {
    case ActKind::Sigmoid: return one / (one + exp_neg(x));
    case ActKind::Tanh: {
      const P m = simd::math::expm1_p(splat(-2.0f) * simd::math::pabs(x));
      return copy_sign((zero - m) / (splat(2.0f) + m), x);
    }
    case ActKind::Silu: return x / (one + exp_neg(x));
    case ActKind::Clip: return clamp(x, splat(a), splat(b));
    case ActKind::HardSigmoid: return clamp(splat(a) * x + splat(b), zero, one);
    case ActKind::HardSwish: return x * clamp(x * splat(1.0f / 6.0f) + splat(0.5f), zero, one);
    case ActKind::LeakyRelu: return select(x > zero, x, splat(a) * x);
    case ActKind::Elu: return select(x > zero, x, splat(a) * simd::math::expm1_p(x));
    case ActKind::Exp: return simd::math::exp_p(x);
    case ActKind::Sqrt: return sqrt_p(x);
  }
  return x;
}

// f'(x) of each kind, on one vector part.
inline P derivative(const ActivationParams& p, float a, float b, P x) {
  const P one = splat(1.0f), zero = splat(0.0f);
  switch (p.kind) {
    case ActKind::Sigmoid: {
      const P e = exp_neg(x), d = one + e;
      return e / (d * d);
    }
    case ActKind::Tanh: {
      const P e = simd::math::exp_p(splat(-2.0f) * simd::math::pabs(x)), d = one + e;
      return splat(4.0f) * e / (d * d);
    }
    case ActKind::Silu: {
      const P e = exp_neg(x), s = one / (one + e);
      return s * (one + x * (e * s));
    }
    case ActKind::Clip: return select((x > splat(a)) & (x < splat(b)), one, zero);
    case ActKind::HardSigmoid: {
      const P u = splat(a) * x + splat(b);
      return select((u > zero) & (u < one), splat(a), zero);
    }
    case ActKind::HardSwish:
      return select(x < splat(-3.0f), zero, select(x > splat(3.0f), one, x * splat(1.0f / 3.0f) + splat(0.5f)));
    case ActKind::LeakyRelu: return select(x > zero, one, splat(a));
    case ActKind::Elu: return select(x > zero, one, splat(a) * simd::math::exp_p(x));
    case ActKind::Exp: return simd::math::exp_p(x);
    case ActKind::Sqrt: return select(x > zero, splat(0.5f) / sqrt_p(x), zero);
  }
  (void)b;
  return one;
}


template <class T>
constexpr bool kBf16 = std::is_same_v<T, bf16_t>;

// in: x  out: y (may be x's buffer)
template <class T>
class Act final : public Kernel {
 public:
  explicit Act(const ActivationParams& p) : p_(p) {}
  const char* name() const override { return kBf16<T> ? "cpu.activation.bf16" : "cpu.activation"; }
  void run(const StepContext&) override {
    const T* x = in<T>(0);
    T* y = out<T>(0);
    const ActivationParams p = p_;
    const float a = static_cast<float>(p.a), b = static_cast<float>(p.b);
    simd::for_chunks(p.n, [=](int64_t i, Mask m) {
      simd::store(y + i, simd::math::map(simd::load(x + i, m), [&](P v) { return value(p, a, b, v); }), m);
    });
  }

 private:
  ActivationParams p_;
};

// in: x, dy  out: dx = dy f'(x) (may be dy's buffer)
template <class T>
class ActBwd final : public Kernel {
 public:
  explicit ActBwd(const ActivationParams& p) : p_(p) {}
  const char* name() const override { return kBf16<T> ? "cpu.activation_bwd.bf16" : "cpu.activation_bwd"; }
  void run(const StepContext&) override {
    const T* x = in<T>(0);
    const T* dy = in<T>(1);
    T* dx = out<T>(0);
    const ActivationParams p = p_;
    const float a = static_cast<float>(p.a), b = static_cast<float>(p.b);
    simd::for_chunks(p.n, [=](int64_t i, Mask m) {
      const V d = simd::math::map(simd::load(x + i, m), [&](P v) { return derivative(p, a, b, v); });
      simd::store(dx + i, simd::load(dy + i, m) * d, m);
    });
  }

 private:
  ActivationParams p_;
};

}  // namespace

std::unique_ptr<Kernel> make_activation(const ActivationParams& p, ElemType act) { return simd::make_for<Act>(act, p); }
std::unique_ptr<Kernel> make_activation_bwd(const ActivationParams& p, ElemType act) {
  return simd::make_for<ActBwd>(act, p);
}

}  // namespace memfit::kernels::cpu
