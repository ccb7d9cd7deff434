// n elements, any shape; chunks of 4096 elements split across threads,
// 16 lanes at a time (masked tail), f32 arithmetic for both storage types.
//
// The formulas avoid cancellation (ops/gelu/ref.hpp states them):
//   exact: Phi(x) = erfc(|x| / sqrt 2) / 2 for x < 0, 1 - erfc(x / sqrt 2) / 2
//          otherwise (simd::verfc is accurate relative to erfc, so x Phi(x)
//          keeps its digits far into x << 0); gelu' = Phi + x exp(-x^2/2) / sqrt(2 pi).
//   tanh:  s = 1 / (1 + e), e = exp(-2u) (= (1 + tanh u) / 2), y = x s,
//          gelu' = s + 2 x s (e s) u' (1 - s = e s). -2u is clamped at 88 so
//          that e stays finite: for x < -10 y is then ~x 6e-39 instead of
//          the true still smaller value, and gelu' stays finite.
#include "ops/gelu/cpu.hpp"

#include <algorithm>
#include <type_traits>

#include "kernels/cpu/bf16_simd.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/simd_math.hpp"

namespace memfit::kernels::cpu {
namespace {

using simd::Mask;
using simd::V;
using simd::math::P;
using simd::math::splat;

constexpr float kSqrtHalf = 0.707106781186547524f;    // 1 / sqrt 2
constexpr float kInvSqrt2Pi = 0.398942280401432678f;  // 1 / sqrt(2 pi)
constexpr float kBeta = 0.797884560802865356f;        // sqrt(2 / pi)
constexpr float kKappa = 0.044715f;

// ---- Per vector part (simd_math.hpp's P) ----

inline P cdf(P x) {
  const P h = splat(0.5f) * simd::math::erfc_p(simd::math::pabs(x) * splat(kSqrtHalf));
  return simd::math::select(x < splat(0.0f), h, splat(1.0f) - h);
}
inline P exact(P x) { return x * cdf(x); }
inline P exact_grad(P x) {
  return cdf(x) + x * splat(kInvSqrt2Pi) * simd::math::exp_p(splat(-0.5f) * x * x);
}

// s = 1 / (1 + e), e = exp(-2u) with -2u clamped at 88.
inline P sigmoid_2u(P x, P& e) {
  const P a = splat(-2.0f * kBeta) * (x + splat(kKappa) * x * x * x);
  e = simd::math::exp_p(simd::math::select(a > splat(88.0f), splat(88.0f), a));
  return splat(1.0f) / (splat(1.0f) + e);
}
inline P tanh_form(P x) {
  P e;
  return x * sigmoid_2u(x, e);
}
inline P tanh_grad(P x) {
  P e;
  const P s = sigmoid_2u(x, e);
  const P du = splat(kBeta) * (splat(1.0f) + splat(3.0f * kKappa) * x * x);
  return s + splat(2.0f) * x * s * (e * s) * du;
}


template <class T>
constexpr bool kBf16 = std::is_same_v<T, bf16_t>;

// in: x  out: y (may be x's buffer)
template <class T>
class Gelu final : public Kernel {
 public:
  explicit Gelu(const GeluParams& p) : p_(p) {}
  const char* name() const override { return kBf16<T> ? "cpu.gelu.bf16" : "cpu.gelu"; }
  void run(const StepContext&) override {
    const T* x = in<T>(0);
    T* y = out<T>(0);
    if (p_.tanh)
      simd::for_chunks(p_.n, [=](int64_t i, Mask m) { simd::store(y + i, simd::math::map(simd::load(x + i, m), tanh_form), m); });
    else
      simd::for_chunks(p_.n, [=](int64_t i, Mask m) { simd::store(y + i, simd::math::map(simd::load(x + i, m), exact), m); });
  }

 private:
  GeluParams p_;
};

// in: x, dy  out: dx = dy gelu'(x) (may be dy's buffer)
template <class T>
class GeluBwd final : public Kernel {
 public:
  explicit GeluBwd(const GeluParams& p) : p_(p) {}
  const char* name() const override { return kBf16<T> ? "cpu.gelu_bwd.bf16" : "cpu.gelu_bwd"; }
  void run(const StepContext&) override {
    const T* x = in<T>(0);
    const T* dy = in<T>(1);
    T* dx = out<T>(0);
    if (p_.tanh)
      simd::for_chunks(p_.n, [=](int64_t i, Mask m) {
        simd::store(dx + i, simd::load(dy + i, m) * simd::math::map(simd::load(x + i, m), tanh_grad), m);
      });
    else
      simd::for_chunks(p_.n, [=](int64_t i, Mask m) {
        simd::store(dx + i, simd::load(dy + i, m) * simd::math::map(simd::load(x + i, m), exact_grad), m);
      });
  }

 private:
  GeluParams p_;
};

}  // namespace

std::unique_ptr<Kernel> make_gelu(const GeluParams& p, ElemType act) { return simd::make_for<Gelu>(act, p); }
std::unique_ptr<Kernel> make_gelu_bwd(const GeluParams& p, ElemType act) { return simd::make_for<GeluBwd>(act, p); }

}  // namespace memfit::kernels::cpu
