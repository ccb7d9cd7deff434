// R rows of D values, rows split across threads, 16 lanes at a time.
//
// Forward, per row: the row max m (lanes past D count as -inf), the sum of
// exp(x - m) in f32 lanes flushed to double (simd::row_sums: each f32
// accumulator holds at most 64 terms, all positive), then y = exp(x - m) / s
// with exp computed again rather than stored and re-read, so the bf16
// kernel rounds each output once, exactly like the f32 one, and y may be
// x's buffer (each element is read before it is written). Subtracting the
// max keeps every exp in (0, 1]: no overflow, and the largest term is 1.
//
// Backward, per row: s = sum dy y (as above), dx = (dy - s) y in f32; dx may
// be dy's buffer.
#include "ops/softmax/cpu.hpp"

#include <limits>
#include <type_traits>

#include "kernels/cpu/bf16_simd.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/simd_math.hpp"

namespace memfit::kernels::cpu {
namespace {

using simd::Mask;
using simd::V;

template <class T>
constexpr bool kBf16 = std::is_same_v<T, bf16_t>;

// in: x  out: y
template <class T>
class Softmax final : public Kernel {
 public:
  explicit Softmax(const SoftmaxParams& p) : p_(p) {}
  const char* name() const override { return kBf16<T> ? "cpu.softmax.bf16" : "cpu.softmax"; }
  void run(const StepContext&) override {
    const T* x = in<T>(0);
    T* y = out<T>(0);
    const int64_t D = p_.D;
    parallel_for(p_.R, p_.R * D, [&](int64_t r) { row(x + r * D, y + r * D, D); });
  }

 private:
  // Out of line: one compiled copy serves the serial and the threaded loop.
  [[gnu::noinline]] static void row(const T* x, T* y, int64_t D) {
    const V ninf = simd::set1(-std::numeric_limits<float>::infinity());
    V mx = ninf;
    simd::for_row(D, [&](int64_t i, Mask m) { mx = simd::vmax(mx, simd::blend(m, simd::load(x + i, m), ninf)); });
    const V vm = simd::set1(simd::hmax(mx));
    const double s = simd::row_sum_d(D, [&](int64_t i, Mask m) { return simd::vexp(simd::load(x + i, m) - vm); });
    const V inv = simd::set1(static_cast<float>(1.0 / s));
    simd::for_row(D, [&](int64_t i, Mask m) { simd::store(y + i, simd::vexp(simd::load(x + i, m) - vm) * inv, m); });
  }

  SoftmaxParams p_;
};

// in: y, dy  out: dx
template <class T>
class SoftmaxBwd final : public Kernel {
 public:
  explicit SoftmaxBwd(const SoftmaxParams& p) : p_(p) {}
  const char* name() const override { return kBf16<T> ? "cpu.softmax_bwd.bf16" : "cpu.softmax_bwd"; }
  void run(const StepContext&) override {
    const T* y = in<T>(0);
    const T* dy = in<T>(1);
    T* dx = out<T>(0);
    const int64_t D = p_.D;
    parallel_for(p_.R, p_.R * D, [&](int64_t r) { row(y + r * D, dy + r * D, dx + r * D, D); });
  }

 private:
  [[gnu::noinline]] static void row(const T* y, const T* dy, T* dx, int64_t D) {
    const double s = simd::row_sum_d(D, [&](int64_t i, Mask m) { return simd::load(dy + i, m) * simd::load(y + i, m); });
    const V vs = simd::set1(static_cast<float>(s));
    simd::for_row(D, [&](int64_t i, Mask m) {
      simd::store(dx + i, (simd::load(dy + i, m) - vs) * simd::load(y + i, m), m);
    });
  }

  SoftmaxParams p_;
};

}  // namespace

std::unique_ptr<Kernel> make_softmax(const SoftmaxParams& p, ElemType act) { return simd::make_for<Softmax>(act, p); }
std::unique_ptr<Kernel> make_softmax_bwd(const SoftmaxParams& p, ElemType act) {
  return simd::make_for<SoftmaxBwd>(act, p);
}

}  // namespace memfit::kernels::cpu
