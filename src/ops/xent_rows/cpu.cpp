#include "ops/xent_rows/cpu.hpp"

#include <cmath>
#include <limits>

#include "kernels/cpu/bf16_simd.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/simd_math.hpp"

namespace memfit::kernels::cpu {
namespace {

using simd::Mask;
using simd::V;

int64_t counted(const int32_t* t, int64_t R) {
  int64_t n = 0;
  for (int64_t r = 0; r < R; ++r) n += t[r] >= 0;
  return n;
}

// in: logits[R,V], targets[R]  out: loss[1], lse[R]; scratch: R doubles
class XentRows final : public Kernel {
 public:
  explicit XentRows(const XentRowsParams& p) : p_(p) {}
  const char* name() const override { return "cpu.xent_rows"; }
  size_t scratch_bytes() const override { return static_cast<size_t>(p_.R) * sizeof(double); }
  void run(const StepContext&) override {
    const float* z = in<float>(0);
    const int32_t* t = in<int32_t>(1);
    float* lse = out<float>(1);
    double* row_loss = static_cast<double*>(scratch_);
    const XentRowsParams p = p_;
    const double on = 1.0 - p.smoothing, off = p.smoothing / static_cast<double>(p.V);
    parallel_for(p.R, p.R * p.V, [&](int64_t r) { row_loss[r] = row(z + r * p.V, p.V, t[r], on, off, lse + r); });
    double total = 0;
    for (int64_t r = 0; r < p.R; ++r) total += row_loss[r];
    const int64_t n = counted(t, p.R);
    out<float>(0)[0] = static_cast<float>(n ? total / static_cast<double>(n) : 0.0);
  }

 private:
  // One row's loss; writes its lse. Padding: 0 and lse 0.
  [[gnu::noinline]] static double row(const float* z, int64_t V_, int32_t y, double on, double off, float* lse) {
    if (y < 0) {
      *lse = 0.0f;
      return 0.0;
    }
    const V ninf = simd::set1(-std::numeric_limits<float>::infinity());
    V mx = ninf;
    simd::for_row(V_, [&](int64_t i, Mask k) { mx = simd::vmax(mx, simd::blend(k, simd::load(z + i, k), ninf)); });
    const float m = simd::hmax(mx);
    const V vm = simd::set1(m);
    double s[2];  // sum exp(z - m), sum z
    simd::row_sums<2>(V_, s, [&](int64_t i, Mask k, V* term) {
      const V x = simd::load(z + i, k);
      term[0] = simd::vexp(x - vm);
      term[1] = x;
    });
    const double l = static_cast<double>(m) + std::log(s[0]);
    *lse = static_cast<float>(l);
    if (y >= V_) return std::numeric_limits<double>::quiet_NaN();
    return l - on * static_cast<double>(z[y]) - off * s[1];
  }

  XentRowsParams p_;
};

// in: logits[R,V], lse[R], targets[R], dloss[1]  out: dlogits[R,V] (may be
// the logits' buffer)
class XentRowsBwd final : public Kernel {
 public:
  explicit XentRowsBwd(const XentRowsParams& p) : p_(p) {}
  const char* name() const override { return "cpu.xent_rows_bwd"; }
  void run(const StepContext&) override {
    const float* z = in<float>(0);
    const float* lse = in<float>(1);
    const int32_t* t = in<int32_t>(2);
    const double dloss = static_cast<double>(in<float>(3)[0]);
    float* dz = out<float>(0);
    const XentRowsParams p = p_;
    const int64_t n = counted(t, p.R);
    const double g = n ? dloss / static_cast<double>(n) : 0.0;
    const double on = 1.0 - p.smoothing, off = p.smoothing / static_cast<double>(p.V);
    parallel_for(p.R, p.R * p.V,
                 [&](int64_t r) { row(z + r * p.V, dz + r * p.V, p.V, t[r], lse[r], g, on, off); });
  }

 private:
  [[gnu::noinline]] static void row(const float* z, float* dz, int64_t V_, int32_t y, float lse, double g, double on,
                                    double off) {
    if (y < 0 || y >= V_) {
      const V fill = simd::set1(y < 0 ? 0.0f : std::numeric_limits<float>::quiet_NaN());
      simd::for_row(V_, [&](int64_t i, Mask k) { simd::store(dz + i, fill, k); });
      return;
    }
    const double zy = static_cast<double>(z[y]);  // before the row is overwritten
    const V vl = simd::set1(lse), vg = simd::set1(static_cast<float>(g)), voff = simd::set1(static_cast<float>(off));
    simd::for_row(V_, [&](int64_t i, Mask k) {
      const V x = simd::load(z + i, k);
      simd::store(dz + i, (simd::vexp(x - vl) - voff) * vg, k);
    });
    dz[y] = static_cast<float>((std::exp(zy - static_cast<double>(lse)) - on - off) * g);
  }

  XentRowsParams p_;
};

}  // namespace

std::unique_ptr<Kernel> make_xent_rows(const XentRowsParams& p) { return std::make_unique<XentRows>(p); }
std::unique_ptr<Kernel> make_xent_rows_bwd(const XentRowsParams& p) { return std::make_unique<XentRowsBwd>(p); }

}  // namespace memfit::kernels::cpu
