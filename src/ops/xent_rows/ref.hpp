// Scalar reference kernels of xent_rows (ops/xent_rows/params.hpp), the
// oracle of the fast ones; T is float or double. Sums in double; lse is
// stored as T and the backward uses the stored value, as the fast kernel
// does.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/kernel.hpp"
#include "ops/xent_rows/params.hpp"

namespace memfit::kernels::ref {

inline int64_t counted_rows(const int32_t* t, int64_t R) {
  int64_t n = 0;
  for (int64_t r = 0; r < R; ++r) n += t[r] >= 0;
  return n;
}

template <class T>
class XentRows final : public Kernel {
 public:
  explicit XentRows(XentRowsParams p) : p_(p) {}
  const char* name() const override { return "ref.xent_rows"; }
  void run(const StepContext&) override {
    const T* z = in<T>(0);
    const int32_t* t = in<int32_t>(1);
    T* lse = out<T>(1);
    const int64_t V = p_.V;
    const double on = 1.0 - p_.smoothing, off = p_.smoothing / static_cast<double>(V);
    double total = 0;
    for (int64_t r = 0; r < p_.R; ++r) {
      const T* zr = z + r * V;
      const int32_t y = t[r];
      if (y < 0) {
        lse[r] = T(0);
        continue;
      }
      double m = static_cast<double>(zr[0]);
      for (int64_t c = 1; c < V; ++c) m = std::max(m, static_cast<double>(zr[c]));
      double s = 0, sz = 0;
      for (int64_t c = 0; c < V; ++c) {
        s += std::exp(static_cast<double>(zr[c]) - m);
        sz += static_cast<double>(zr[c]);
      }
      const double l = m + std::log(s);
      lse[r] = static_cast<T>(l);
      if (y >= V) {
        total += std::numeric_limits<double>::quiet_NaN();
        continue;
      }
      total += l - on * static_cast<double>(zr[y]) - off * sz;
    }
    const int64_t n = counted_rows(t, p_.R);
    out<T>(0)[0] = static_cast<T>(n ? total / static_cast<double>(n) : 0.0);
  }

 private:
  XentRowsParams p_;
};

// dlogits may be the logits' buffer: each element is read before it is
// written.
template <class T>
class XentRowsBwd final : public Kernel {
 public:
  explicit XentRowsBwd(XentRowsParams p) : p_(p) {}
  const char* name() const override { return "ref.xent_rows_bwd"; }
  void run(const StepContext&) override {
    const T* z = in<T>(0);
    const T* lse = in<T>(1);
    const int32_t* t = in<int32_t>(2);
    const T dloss = in<T>(3)[0];
    T* dz = out<T>(0);
    const int64_t V = p_.V, n = counted_rows(t, p_.R);
    const double g = n ? static_cast<double>(dloss) / static_cast<double>(n) : 0.0;
    const double on = 1.0 - p_.smoothing, off = p_.smoothing / static_cast<double>(V);
    for (int64_t r = 0; r < p_.R; ++r) {
      const int32_t y = t[r];
      const double l = static_cast<double>(lse[r]);
      for (int64_t c = 0; c < V; ++c) {
        const int64_t k = r * V + c;
        if (y < 0)
          dz[k] = T(0);
        else if (y >= V)
          dz[k] = std::numeric_limits<T>::quiet_NaN();
        else
          dz[k] = static_cast<T>((std::exp(static_cast<double>(z[k]) - l) - (c == y ? on : 0.0) - off) * g);
      }
    }
  }

 private:
  XentRowsParams p_;
};

}  // namespace memfit::kernels::ref
