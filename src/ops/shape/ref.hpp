// Scalar reference kernels for the layout ops concat, slice and slice_bwd (the test
// oracle). T is the stored element type: float or double for float values,
// int32_t or uint8_t for integer ones (pure copies, any type works).
// Tensors are viewed as [outer, axis, inner] around the joined/sliced axis.
#pragma once

#include <algorithm>
#include <utility>

#include "kernels/kernel.hpp"
#include "ops/shape/params.hpp"

namespace memfit::kernels::ref {

// in: x_0..x_{k-1}[outer, sizes[t], inner]   out: y[outer, sum(sizes), inner]
template <class T>
class Concat final : public Kernel {
 public:
  explicit Concat(ConcatParams p) : p_(std::move(p)) {}
  const char* name() const override { return "ref.concat"; }
  void run(const StepContext&) override {
    T* y = out<T>(0);
    int64_t total = 0;
    for (int64_t s : p_.sizes) total += s;
    for (int64_t o = 0; o < p_.outer; ++o) {
      T* yo = y + o * total * p_.inner;
      for (size_t t = 0; t < p_.sizes.size(); ++t) {
        const int64_t chunk = p_.sizes[t] * p_.inner;
        const T* x = in<T>(t) + o * chunk;
        yo = std::copy(x, x + chunk, yo);
      }
    }
  }

 private:
  ConcatParams p_;
};

// in: x[outer, axis_in, inner]   out: y[outer, len, inner] = x[:, start:start+len, :]
template <class T>
class Slice final : public Kernel {
 public:
  explicit Slice(SliceParams p) : p_(p) {}
  const char* name() const override { return "ref.slice"; }
  void run(const StepContext&) override {
    const T* x = in<T>(0);
    T* y = out<T>(0);
    const int64_t chunk = p_.len * p_.inner;
    for (int64_t o = 0; o < p_.outer; ++o) {
      const T* xo = x + (o * p_.axis_in + p_.start) * p_.inner;
      std::copy(xo, xo + chunk, y + o * chunk);
    }
  }

 private:
  SliceParams p_;
};

// The slice's gradient. in: dy[outer, len, inner]
// out: dx[outer, axis_in, inner], dy at [start, start+len) of the axis, 0 elsewhere.
template <class T>
class SliceBwd final : public Kernel {
 public:
  explicit SliceBwd(SliceParams p) : p_(p) {}
  const char* name() const override { return "ref.slice_bwd"; }
  void run(const StepContext&) override {
    const T* dy = in<T>(0);
    T* dx = out<T>(0);
    const int64_t chunk = p_.len * p_.inner;
    for (int64_t o = 0; o < p_.outer; ++o) {
      T* xo = dx + o * p_.axis_in * p_.inner;
      std::fill(xo, xo + p_.start * p_.inner, T(0));
      std::copy(dy + o * chunk, dy + (o + 1) * chunk, xo + p_.start * p_.inner);
      std::fill(xo + (p_.start + p_.len) * p_.inner, xo + p_.axis_in * p_.inner, T(0));
    }
  }

 private:
  SliceParams p_;
};

}  // namespace memfit::kernels::ref
