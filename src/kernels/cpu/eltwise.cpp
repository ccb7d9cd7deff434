// n elements, any shape.
#include "kernels/cpu/eltwise.hpp"

#include "kernels/cpu/dnnl_util.hpp"
#include "kernels/cpu/parallel.hpp"

namespace memfit::kernels::cpu {
namespace {

// in: x  out: y = max(x, 0)
class Relu final : public Kernel {
 public:
  explicit Relu(const EltwiseParams& p) : data_(plain_f32({p.n})) {
    dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_training, dnnl::algorithm::eltwise_relu, data_, 0.0f, 0.0f);
    pd_ = {desc, user_scratchpad_attr(), engine()};
    call_.set(dnnl::eltwise_forward(pd_));
  }
  const char* name() const override { return "dnnl.relu"; }
  size_t scratch_bytes() const override { return scratchpad_bytes(pd_); }
  void run(const StepContext&) override { call_.run(); }

 private:
  void on_bind() override {
    call_.clear_args();
    call_.arg(DNNL_ARG_SRC, data_, in_[0]);
    call_.arg(DNNL_ARG_DST, data_, out_[0]);
    call_.arg(DNNL_ARG_SCRATCHPAD, pd_.scratchpad_desc(), scratch_);
  }
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

std::unique_ptr<Kernel> make_relu(const EltwiseParams& p) { return try_make<Relu, Kernel>(p); }
std::unique_ptr<Kernel> make_relu_bwd(const EltwiseParams& p) { return std::make_unique<ReluBwd>(p); }
std::unique_ptr<Kernel> make_add(const EltwiseParams& p) { return std::make_unique<Add>(p); }
std::unique_ptr<Kernel> make_scale(const EltwiseParams& p) { return std::make_unique<Scale>(p); }
std::unique_ptr<Kernel> make_fill(const FillParams& p) { return std::make_unique<Fill>(p); }

}  // namespace memfit::kernels::cpu
