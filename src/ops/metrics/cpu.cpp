#include "ops/metrics/cpu.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/bf16_simd.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/simd_math.hpp"

namespace memfit::kernels::cpu {
namespace {

using simd::Mask;
using simd::V;

constexpr int kMaxThreads = 256;

class XentMetrics final : public Kernel {
 public:
  explicit XentMetrics(const MetricsParams& p) : p_(p) {}
  const char* name() const override { return "cpu.xent_metrics"; }
  void run(const StepContext&) override {
    const float* z = in<float>(0);
    const int32_t* labels = in<int32_t>(1);
    const int64_t R = p_.R, C = p_.C;
    double part[kMaxThreads][3] = {};
    int teams = 1;
    parallel_region(R * C, [&] {
      const int t = omp_get_thread_num();
      const int nt = omp_get_num_threads();
      if (t == 0) teams = nt;
      if (t >= kMaxThreads) return;
      // Rows by contiguous blocks, thread t the t-th: the same partition as
      // a static schedule, written out so that threads past kMaxThreads
      // (none on any machine memfit runs on) are covered by thread 0.
      const int used = std::min(nt, kMaxThreads);
      const int64_t per = (R + used - 1) / used;
      auto rows = [&](int64_t lo, int64_t hi, double* acc) {
        for (int64_t r = lo; r < hi; ++r) row(z + r * C, C, labels[r], acc);
      };
      rows(std::min(R, per * t), std::min(R, per * (t + 1)), part[t]);
    });
    double loss = 0, correct = 0, count = 0;
    for (int t = 0; t < std::min(teams, kMaxThreads); ++t) {
      loss += part[t][0];
      correct += part[t][1];
      count += part[t][2];
    }
    *out<float>(0) = static_cast<float>(loss);
    *out<float>(1) = static_cast<float>(correct);
    *out<float>(2) = static_cast<float>(count);
  }

 private:
  [[gnu::noinline]] static void row(const float* z, int64_t C, int32_t y, double* acc) {
    if (y < 0) return;
    const V ninf = simd::set1(-std::numeric_limits<float>::infinity());
    V mx = ninf;
    simd::for_row(C, [&](int64_t i, Mask m) { mx = simd::vmax(mx, simd::blend(m, simd::load(z + i, m), ninf)); });
    const float m = simd::hmax(mx);
    int64_t best = 0;
    while (best < C - 1 && !(z[best] == m)) ++best;  // the first maximum (a NaN row: 0, as the reference)
    const V vm = simd::set1(m);
    const double s = simd::row_sum_d(C, [&](int64_t i, Mask k) { return simd::vexp(simd::load(z + i, k) - vm); });
    acc[2] += 1;
    if (y >= C) {
      acc[0] += std::numeric_limits<double>::quiet_NaN();
      return;
    }
    acc[0] += std::log(s) + static_cast<double>(m) - static_cast<double>(z[y]);
    acc[1] += best == y;
  }

  MetricsParams p_;
};

}  // namespace

std::unique_ptr<Kernel> make_xent_metrics(const MetricsParams& p) { return std::make_unique<XentMetrics>(p); }

}  // namespace memfit::kernels::cpu
