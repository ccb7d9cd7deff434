// Scalar reference kernels of the element-wise binary ops with
// broadcasting (the test oracle), as ops/binary/params.hpp specifies, and
// the index walks the fast kernels share. T is float or double; the
// arithmetic is double for either.
#pragma once

#include <array>
#include <cstdint>

#include "kernels/kernel.hpp"
#include "ops/binary/params.hpp"

namespace memfit::kernels {

namespace binary_detail {

inline double value(BinaryKind k, double a, double b) {
  switch (k) {
    case BinaryKind::Add: return a + b;
    case BinaryKind::Sub: return a - b;
    case BinaryKind::Mul: return a * b;
    case BinaryKind::Div: return a / b;
  }
  return 0.0;
}

// df/da (wrt 0) or df/db (wrt 1).
inline double derivative(BinaryKind k, int wrt, double a, double b) {
  switch (k) {
    case BinaryKind::Add: return 1.0;
    case BinaryKind::Sub: return wrt == 0 ? 1.0 : -1.0;
    case BinaryKind::Mul: return wrt == 0 ? b : a;
    case BinaryKind::Div: return wrt == 0 ? 1.0 / b : -a / (b * b);
  }
  return 0.0;
}

// y's row-major strides over the collapsed axes.
inline std::array<int64_t, kMaxBinaryAxes> y_strides(const BinaryParams& p) {
  std::array<int64_t, kMaxBinaryAxes> s{};
  int64_t m = 1;
  for (size_t k = p.dims.size(); k-- > 0;) s[k] = m, m *= p.dims[k];
  return s;
}

// The elements of y that the gradient's element j (of input p.wrt) sums:
// calls f(y offset, a offset, b offset) for each, in y's order.
template <class F>
inline void for_each_summed(const BinaryParams& p, const std::array<int64_t, kMaxBinaryAxes>& ys, int64_t j, F&& f) {
  const std::vector<int64_t>& xs = p.wrt == 0 ? p.a_strides : p.b_strides;
  const size_t r = p.dims.size();
  // j's coordinates along x's own axes (row-major in x), the others from 0.
  std::array<int64_t, kMaxBinaryAxes> c{};
  for (size_t k = r; k-- > 0;)
    if (xs[k] != 0) c[k] = j % p.dims[k], j /= p.dims[k];
  int64_t y = 0, a = 0, b = 0;
  for (size_t k = 0; k < r; ++k) y += c[k] * ys[k], a += c[k] * p.a_strides[k], b += c[k] * p.b_strides[k];
  for (;;) {
    f(y, a, b);
    // The next coordinate along the summed axes (those x is broadcast on).
    size_t k = r;
    while (k-- > 0) {
      if (xs[k] != 0) continue;
      if (++c[k] < p.dims[k]) {
        y += ys[k], a += p.a_strides[k], b += p.b_strides[k];
        break;
      }
      y -= (p.dims[k] - 1) * ys[k], a -= (p.dims[k] - 1) * p.a_strides[k], b -= (p.dims[k] - 1) * p.b_strides[k];
      c[k] = 0;
    }
    if (k == static_cast<size_t>(-1)) return;
  }
}

// Elements of the gradient of input p.wrt.
inline int64_t grad_numel(const BinaryParams& p) {
  const std::vector<int64_t>& xs = p.wrt == 0 ? p.a_strides : p.b_strides;
  int64_t n = 1;
  for (size_t k = 0; k < p.dims.size(); ++k)
    if (xs[k] != 0) n *= p.dims[k];
  return n;
}

}  // namespace binary_detail

namespace ref {

// in: a, b  out: y
template <class T>
class Binary final : public Kernel {
 public:
  explicit Binary(BinaryParams p) : p_(std::move(p)) {}
  const char* name() const override { return "ref.binary"; }
  void run(const StepContext&) override {
    const T* a = in<T>(0);
    const T* b = in<T>(1);
    T* y = out<T>(0);
    const size_t r = p_.dims.size();
    std::array<int64_t, kMaxBinaryAxes> c{};
    int64_t ia = 0, ib = 0;
    const int64_t n = binary_numel(p_);
    for (int64_t i = 0; i < n; ++i) {
      y[i] = static_cast<T>(binary_detail::value(p_.kind, static_cast<double>(a[ia]), static_cast<double>(b[ib])));
      for (size_t k = r; k-- > 0;) {
        if (++c[k] < p_.dims[k]) {
          ia += p_.a_strides[k], ib += p_.b_strides[k];
          break;
        }
        ia -= (p_.dims[k] - 1) * p_.a_strides[k], ib -= (p_.dims[k] - 1) * p_.b_strides[k];
        c[k] = 0;
      }
    }
  }

 private:
  BinaryParams p_;
};

// in: a, b, dy  out: the gradient of input p.wrt (its shape)
template <class T>
class BinaryBwd final : public Kernel {
 public:
  explicit BinaryBwd(BinaryParams p) : p_(std::move(p)) {}
  const char* name() const override { return "ref.binary_bwd"; }
  void run(const StepContext&) override {
    const T* a = in<T>(0);
    const T* b = in<T>(1);
    const T* dy = in<T>(2);
    T* dx = out<T>(0);
    const auto ys = binary_detail::y_strides(p_);
    const int64_t n = binary_detail::grad_numel(p_);
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      binary_detail::for_each_summed(p_, ys, j, [&](int64_t y, int64_t ia, int64_t ib) {
        s += static_cast<double>(dy[y]) *
             binary_detail::derivative(p_.kind, p_.wrt, static_cast<double>(a[ia]), static_cast<double>(b[ib]));
      });
      dx[j] = static_cast<T>(s);
    }
  }

 private:
  BinaryParams p_;
};

}  // namespace ref
}  // namespace memfit::kernels
