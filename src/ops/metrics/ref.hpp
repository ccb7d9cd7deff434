// Scalar reference kernel of xent_metrics (ops/metrics/params.hpp), the
// oracle of the fast one; T is float or double. Accumulates in double.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/kernel.hpp"
#include "ops/metrics/params.hpp"

namespace memfit::kernels::ref {

template <class T>
class XentMetrics final : public Kernel {
 public:
  explicit XentMetrics(MetricsParams p) : p_(p) {}
  const char* name() const override { return "ref.xent_metrics"; }
  void run(const StepContext&) override {
    const T* z = in<T>(0);
    const int32_t* labels = in<int32_t>(1);
    const int64_t C = p_.C;
    double loss = 0, correct = 0, count = 0;
    for (int64_t r = 0; r < p_.R; ++r) {
      const int32_t y = labels[r];
      if (y < 0) continue;
      const T* zr = z + r * C;
      int64_t best = 0;
      for (int64_t c = 1; c < C; ++c)
        if (zr[c] > zr[best]) best = c;
      const double m = static_cast<double>(zr[best]);
      double s = 0;
      for (int64_t c = 0; c < C; ++c) s += std::exp(static_cast<double>(zr[c]) - m);
      count += 1;
      if (y >= C) {
        loss += std::numeric_limits<double>::quiet_NaN();
        continue;
      }
      loss += std::log(s) + m - static_cast<double>(zr[y]);
      correct += best == y;
    }
    *out<T>(0) = static_cast<T>(loss);
    *out<T>(1) = static_cast<T>(correct);
    *out<T>(2) = static_cast<T>(count);
  }

 private:
  MetricsParams p_;
};

}  // namespace memfit::kernels::ref
