// N rows, C classes; s = smoothing, q = (1-s) onehot(label) + s/C.
// Rows are independent and split across threads; the per-row losses are
// summed in double (OpenMP reduction, so the order of that sum differs from
// the reference's by rounding only). An out-of-range label makes its row's
// loss and gradient NaN, as in the reference.
//
// bf16 (act = BF16): the logits are bf16 (read exactly into double), dlogits
// bf16 (the f32 value of the f32 kernel, rounded once more to bf16); the loss
// and the probabilities stay f32. The rows are C classes long (10 here), far
// too short for vector code to matter: the loops stay scalar, templated on
// the logits' storage type.
#include "ops/loss/cpu.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/bf16.hpp"
#include "kernels/cpu/parallel.hpp"

namespace memfit::kernels::cpu {
namespace {

inline float as_float(float v) { return v; }
inline float as_float(bf16_t v) { return bf16_to_f32(v); }
inline void put(float* p, float v) { *p = v; }
inline void put(bf16_t* p, float v) { *p = f32_to_bf16(v); }

// in: logits[N,C] (Z), labels[N] (i32)  out: loss[1], probs[N,C] (f32)
template <class Z>
class SoftmaxXent final : public Kernel {
 public:
  explicit SoftmaxXent(const XentParams& p) : p_(p) {}
  const char* name() const override { return sizeof(Z) == 2 ? "cpu.softmax_xent.bf16" : "cpu.softmax_xent"; }
  void run(const StepContext&) override {
    const Z* z = in<Z>(0);
    const int32_t* labels = in<int32_t>(1);
    float* probs = out<float>(1);
    const int64_t N = p_.N, C = p_.C;
    const double s = p_.smoothing, on = 1.0 - s, off = s / static_cast<double>(C);
    const double total = parallel_sum(N * C, [&] {
      double part = 0.0;
#pragma omp for schedule(static) nowait
      for (int64_t i = 0; i < N; ++i) {
        const Z* zr = z + i * C;
        auto zi = [zr](int64_t c) { return static_cast<double>(as_float(zr[c])); };
        float* pi = probs + i * C;
        double mx = zi(0);
        for (int64_t c = 1; c < C; ++c) mx = std::max(mx, zi(c));
        double sum = 0.0, sum_shifted = 0.0;
        for (int64_t c = 0; c < C; ++c) {
          const double d = zi(c) - mx;
          sum += std::exp(d);
          sum_shifted += d;
        }
        const double lse = std::log(sum);
        for (int64_t c = 0; c < C; ++c) pi[c] = static_cast<float>(std::exp(zi(c) - mx) / sum);
        const int32_t y = labels[i];
        if (y < 0 || y >= C) {
          part += std::numeric_limits<double>::quiet_NaN();
          continue;
        }
        // -sum_c q_c log p_c = (1-s) (lse - d_y) + s/C (C lse - sum_c d_c)
        part += on * (lse - (zi(y) - mx)) + off * (static_cast<double>(C) * lse - sum_shifted);
      }
      return part;
    });
    out<float>(0)[0] = static_cast<float>(total / static_cast<double>(N));
  }

 private:
  XentParams p_;
};

// in: probs, labels, dloss[1]  out: dlogits (D) = (p - q) dloss / N (may be
// probs' buffer when D is f32)
template <class D>
class SoftmaxXentBwd final : public Kernel {
 public:
  explicit SoftmaxXentBwd(const XentParams& p) : p_(p) {}
  const char* name() const override { return sizeof(D) == 2 ? "cpu.softmax_xent_bwd.bf16" : "cpu.softmax_xent_bwd"; }
  void run(const StepContext&) override {
    const float* probs = in<float>(0);
    const int32_t* labels = in<int32_t>(1);
    const double g = static_cast<double>(in<float>(2)[0]) / static_cast<double>(p_.N);
    D* dz = out<D>(0);
    const int64_t N = p_.N, C = p_.C;
    const double on = 1.0 - p_.smoothing, off = p_.smoothing / static_cast<double>(C);
    constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
    parallel_for(N, N * C, [&](int64_t i) {
      const int32_t y = labels[i];
      const bool valid = y >= 0 && y < C;
      for (int64_t c = 0; c < C; ++c) {
        const double q = (c == y ? on : 0.0) + off;
        put(dz + i * C + c, valid ? static_cast<float>((static_cast<double>(probs[i * C + c]) - q) * g) : kNaN);
      }
    });
  }

 private:
  XentParams p_;
};

}  // namespace

std::unique_ptr<Kernel> make_softmax_xent(const XentParams& p, ElemType act) {
  if (act == ElemType::BF16) return std::make_unique<SoftmaxXent<bf16_t>>(p);
  return act == ElemType::F32 ? std::make_unique<SoftmaxXent<float>>(p) : nullptr;
}
std::unique_ptr<Kernel> make_softmax_xent_bwd(const XentParams& p, ElemType act) {
  if (act == ElemType::BF16) return std::make_unique<SoftmaxXentBwd<bf16_t>>(p);
  return act == ElemType::F32 ? std::make_unique<SoftmaxXentBwd<float>>(p) : nullptr;
}

}  // namespace memfit::kernels::cpu
