// n elements, any shape (so any layout: Blocked16 activations included).
// bf16 (act = BF16): relu is oneDNN's bf16 eltwise; the rest are AVX-512
// loops (kernels/cpu/bf16_simd.hpp) over 16 elements at a time.
#include "ops/eltwise/cpu.hpp"

#include "kernels/cpu/bf16_simd.hpp"
#include "kernels/cpu/dnnl_util.hpp"
#include "kernels/cpu/parallel.hpp"

namespace memfit::kernels::cpu {
namespace {

// in: x  out: y = max(x, 0)
class Relu final : public Kernel {
 public:
  Relu(const EltwiseParams& p, ElemType act)
      : bf16_(act == ElemType::BF16),
        data_(bf16_ ? dnnl::memory::desc({p.n}, dnnl::memory::data_type::bf16, dnnl::memory::format_tag::a)
                    : plain_f32({p.n})) {
    dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_training, dnnl::algorithm::eltwise_relu, data_, 0.0f, 0.0f);
    pd_ = {desc, user_scratchpad_attr(), engine()};
    call_.set(dnnl::eltwise_forward(pd_));
  }
  const char* name() const override { return bf16_ ? "dnnl.relu.bf16" : "dnnl.relu"; }
  size_t scratch_bytes() const override { return scratchpad_bytes(pd_); }
  void run(const StepContext&) override { call_.run(); }

 private:
  void on_bind() override {
    call_.clear_args();
    call_.arg(DNNL_ARG_SRC, data_, in_[0]);
    call_.arg(DNNL_ARG_DST, data_, out_[0]);
    call_.arg(DNNL_ARG_SCRATCHPAD, pd_.scratchpad_desc(), scratch_);
  }
  bool bf16_;
  dnnl::memory::desc data_;
  dnnl::eltwise_forward::primitive_desc pd_;
  Call call_;
};

// in: y, dy  out: dx = y > 0 ? dy : 0 (a select, so an inf/NaN dy where the
// unit is off still gives 0, as the reference does).
class ReluBwd final : public Kernel {
 public:
  explicit ReluBwd(const EltwiseParams& p) : n_(p.n) {}
  const char* name() const override { return "cpu.relu_bwd"; }
  void run(const StepContext&) override {
    const float* y = in<float>(0);
    const float* dy = in<float>(1);
    float* dx = out<float>(0);
    const int64_t n = n_;
    // The load is unconditional so that the loop vectorises (a load under
    // the condition would keep it scalar, with a branch per element).
    parallel_for_simd(n, [&](int64_t i) {
      const float g = dy[i];
      dx[i] = y[i] > 0.0f ? g : 0.0f;
    });
  }

 private:
  int64_t n_;
};

// in: a, b  out: a + b
class Add final : public Kernel {
 public:
  explicit Add(const EltwiseParams& p) : n_(p.n) {}
  const char* name() const override { return "cpu.add"; }
  void run(const StepContext&) override {
    const float* a = in<float>(0);
    const float* b = in<float>(1);
    float* y = out<float>(0);
    const int64_t n = n_;
    parallel_for_simd(n, [&](int64_t i) { y[i] = a[i] + b[i]; });
  }

 private:
  int64_t n_;
};

// in: x  out: alpha * x
class Scale final : public Kernel {
 public:
  explicit Scale(const EltwiseParams& p) : n_(p.n), alpha_(static_cast<float>(p.alpha)) {}
  const char* name() const override { return "cpu.scale"; }
  void run(const StepContext&) override {
    const float* x = in<float>(0);
    float* y = out<float>(0);
    const int64_t n = n_;
    const float alpha = alpha_;
    parallel_for_simd(n, [&](int64_t i) { y[i] = alpha * x[i]; });
  }

 private:
  int64_t n_;
  float alpha_;
};

#if MEMFIT_BF16_SIMD

// bf16: dx = y > 0 ? dy : 0, a masked copy of dy's bits (exact).
class ReluBwdBf16 final : public Kernel {
 public:
  explicit ReluBwdBf16(const EltwiseParams& p) : n_(p.n) {}
  const char* name() const override { return "cpu.relu_bwd.bf16"; }
  void run(const StepContext&) override {
    const bf16_t* y = in<bf16_t>(0);
    const bf16_t* dy = in<bf16_t>(1);
    bf16_t* dx = out<bf16_t>(0);
    const __m512 zero = _mm512_setzero_ps();
    simd::for_lanes(n_, [&](int64_t i, __mmask16 m) {
      const __mmask16 on = _mm512_cmp_ps_mask(simd::load(y + i, m), zero, _CMP_GT_OQ);
      _mm256_mask_storeu_epi16(dx + i, m, _mm256_maskz_loadu_epi16(on & m, dy + i));
    });
  }

 private:
  int64_t n_;
};

// bf16: y = round(a + b)
class AddBf16 final : public Kernel {
 public:
  explicit AddBf16(const EltwiseParams& p) : n_(p.n) {}
  const char* name() const override { return "cpu.add.bf16"; }
  void run(const StepContext&) override {
    const bf16_t* a = in<bf16_t>(0);
    const bf16_t* b = in<bf16_t>(1);
    bf16_t* y = out<bf16_t>(0);
    simd::for_lanes(n_, [&](int64_t i, __mmask16 m) {
      simd::store(y + i, _mm512_add_ps(simd::load(a + i, m), simd::load(b + i, m)), m);
    });
  }

 private:
  int64_t n_;
};

// bf16: y = round(alpha x), alpha the f32 of the f32 kernel
class ScaleBf16 final : public Kernel {
 public:
  explicit ScaleBf16(const EltwiseParams& p) : n_(p.n), alpha_(static_cast<float>(p.alpha)) {}
  const char* name() const override { return "cpu.scale.bf16"; }
  void run(const StepContext&) override {
    const bf16_t* x = in<bf16_t>(0);
    bf16_t* y = out<bf16_t>(0);
    const __m512 alpha = _mm512_set1_ps(alpha_);
    simd::for_lanes(n_, [&](int64_t i, __mmask16 m) { simd::store(y + i, _mm512_mul_ps(alpha, simd::load(x + i, m)), m); });
  }

 private:
  int64_t n_;
  float alpha_;
};

#endif

// out: y = value
class Fill final : public Kernel {
 public:
  explicit Fill(const FillParams& p) : n_(p.n), value_(static_cast<float>(p.value)) {}
  const char* name() const override { return "cpu.fill"; }
  void run(const StepContext&) override {
    float* y = out<float>(0);
    const int64_t n = n_;
    const float v = value_;
    parallel_for_simd(n, [&](int64_t i) { y[i] = v; });
  }

 private:
  int64_t n_;
  float value_;
};

}  // namespace

std::unique_ptr<Kernel> make_relu(const EltwiseParams& p, ElemType act) {
  if (act != ElemType::F32 && act != ElemType::BF16) return nullptr;
  return try_make<Relu, Kernel>(p, act);
}
std::unique_ptr<Kernel> make_relu_bwd(const EltwiseParams& p, ElemType act) {
#if MEMFIT_BF16_SIMD
  if (act == ElemType::BF16) return std::make_unique<ReluBwdBf16>(p);
#endif
  return act == ElemType::F32 ? std::make_unique<ReluBwd>(p) : nullptr;
}
std::unique_ptr<Kernel> make_add(const EltwiseParams& p, ElemType act) {
#if MEMFIT_BF16_SIMD
  if (act == ElemType::BF16) return std::make_unique<AddBf16>(p);
#endif
  return act == ElemType::F32 ? std::make_unique<Add>(p) : nullptr;
}
std::unique_ptr<Kernel> make_scale(const EltwiseParams& p, ElemType act) {
#if MEMFIT_BF16_SIMD
  if (act == ElemType::BF16) return std::make_unique<ScaleBf16>(p);
#endif
  return act == ElemType::F32 ? std::make_unique<Scale>(p) : nullptr;
}
std::unique_ptr<Kernel> make_fill(const FillParams& p) { return std::make_unique<Fill>(p); }

}  // namespace memfit::kernels::cpu
