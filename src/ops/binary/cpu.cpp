// Rows of y's last collapsed axis split across threads; along a row a and b
// are read at stride 1 or 0 (broadcast), three loop forms the compiler
// vectorises. A gradient of an input that is not broadcast is element-wise
// the same way; one that is sums, per element of the gradient, the
// elements of y it was broadcast to (binary_detail::for_each_summed) in
// double and in y's order, so the result does not depend on the threads.
#include "ops/binary/cpu.hpp"

#include <algorithm>

#include "kernels/cpu/parallel.hpp"
#include "ops/binary/ref.hpp"

namespace memfit::kernels::cpu {
namespace {

template <BinaryKind K>
inline float f(float a, float b) {
  if constexpr (K == BinaryKind::Add) return a + b;
  if constexpr (K == BinaryKind::Sub) return a - b;
  if constexpr (K == BinaryKind::Mul) return a * b;
  return a / b;
}

// dy df/dx for input W.
template <BinaryKind K, int W>
inline float df(float dy, float a, float b) {
  if constexpr (K == BinaryKind::Add) return dy;
  if constexpr (K == BinaryKind::Sub) return W == 0 ? dy : -dy;
  if constexpr (K == BinaryKind::Mul) return W == 0 ? dy * b : dy * a;
  return W == 0 ? dy / b : -dy * a / (b * b);
}

// The offsets of a and b at the start of row `row` (all axes but the last).
inline void row_start(const BinaryParams& p, int64_t row, int64_t& ia, int64_t& ib) {
  ia = ib = 0;
  for (size_t k = p.dims.size() - 1; k-- > 0;) {
    const int64_t c = row % p.dims[k];
    row /= p.dims[k];
    ia += c * p.a_strides[k];
    ib += c * p.b_strides[k];
  }
}

// out[i] = op(i, a[ia + i sa], b[ib + i sb]) over each row.
template <class Op>
void rows(const BinaryParams& p, const float* a, const float* b, float* out, Op op) {
  const int64_t L = p.dims.back(), n = binary_numel(p);
  const int64_t sa = p.a_strides.back(), sb = p.b_strides.back();
  parallel_for(n / L, n, [&](int64_t r) {
    int64_t ia, ib;
    row_start(p, r, ia, ib);
    const float* ar = a + ia;
    const float* br = b + ib;
    float* o = out + r * L;
    const int64_t y0 = r * L;
    if (sa && sb) {
#pragma omp simd
      for (int64_t i = 0; i < L; ++i) o[i] = op(y0 + i, ar[i], br[i]);
    } else if (sa) {
      const float bv = br[0];
#pragma omp simd
      for (int64_t i = 0; i < L; ++i) o[i] = op(y0 + i, ar[i], bv);
    } else {
      const float av = ar[0];
#pragma omp simd
      for (int64_t i = 0; i < L; ++i) o[i] = op(y0 + i, av, br[i]);
    }
  });
}

template <BinaryKind K>
void forward(const BinaryParams& p, const float* a, const float* b, float* y) {
  rows(p, a, b, y, [](int64_t, float x, float z) { return f<K>(x, z); });
}

template <BinaryKind K, int W>
void backward(const BinaryParams& p, const float* a, const float* b, const float* dy, float* dx) {
  const std::vector<int64_t>& xs = W == 0 ? p.a_strides : p.b_strides;
  if (std::none_of(xs.begin(), xs.end(), [](int64_t s) { return s == 0; })) {
    // Not broadcast: dx has y's shape and layout.
    rows(p, a, b, dx, [dy](int64_t i, float x, float z) { return df<K, W>(dy[i], x, z); });
    return;
  }
  const auto ys = binary_detail::y_strides(p);
  const int64_t n = binary_detail::grad_numel(p);
  parallel_for(n, binary_numel(p), [&](int64_t j) {
    double s = 0.0;
    binary_detail::for_each_summed(p, ys, j, [&](int64_t y, int64_t ia, int64_t ib) {
      s += static_cast<double>(df<K, W>(dy[y], a[ia], b[ib]));
    });
    dx[j] = static_cast<float>(s);
  });
}

class Binary final : public Kernel {
 public:
  explicit Binary(BinaryParams p) : p_(std::move(p)) {}
  const char* name() const override { return "cpu.binary"; }
  void run(const StepContext&) override {
    const float* a = in<float>(0);
    const float* b = in<float>(1);
    float* y = out<float>(0);
    switch (p_.kind) {
      case BinaryKind::Add: return forward<BinaryKind::Add>(p_, a, b, y);
      case BinaryKind::Sub: return forward<BinaryKind::Sub>(p_, a, b, y);
      case BinaryKind::Mul: return forward<BinaryKind::Mul>(p_, a, b, y);
      case BinaryKind::Div: return forward<BinaryKind::Div>(p_, a, b, y);
    }
  }

 private:
  BinaryParams p_;
};

class BinaryBwd final : public Kernel {
 public:
  explicit BinaryBwd(BinaryParams p) : p_(std::move(p)) {}
  const char* name() const override { return "cpu.binary_bwd"; }
  void run(const StepContext&) override {
    const float* a = in<float>(0);
    const float* b = in<float>(1);
    const float* dy = in<float>(2);
    float* dx = out<float>(0);
    if (p_.wrt == 0) return dispatch<0>(a, b, dy, dx);
    dispatch<1>(a, b, dy, dx);
  }

 private:
  template <int W>
  void dispatch(const float* a, const float* b, const float* dy, float* dx) {
    switch (p_.kind) {
      case BinaryKind::Add: return backward<BinaryKind::Add, W>(p_, a, b, dy, dx);
      case BinaryKind::Sub: return backward<BinaryKind::Sub, W>(p_, a, b, dy, dx);
      case BinaryKind::Mul: return backward<BinaryKind::Mul, W>(p_, a, b, dy, dx);
      case BinaryKind::Div: return backward<BinaryKind::Div, W>(p_, a, b, dy, dx);
    }
  }
  BinaryParams p_;
};

}  // namespace

std::unique_ptr<Kernel> make_binary(const BinaryParams& p) { return std::make_unique<Binary>(p); }
std::unique_ptr<Kernel> make_binary_bwd(const BinaryParams& p) { return std::make_unique<BinaryBwd>(p); }

}  // namespace memfit::kernels::cpu
