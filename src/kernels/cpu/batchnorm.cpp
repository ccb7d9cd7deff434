// N batch, C channels, HW spatial elements per channel (1 for [N, C] input).
// The data are described to oneDNN as [N, C, HW, 1].
//
// Training: oneDNN normalises with the batch statistics and writes them
// (mean, biased variance) to the mean/var outputs; the running statistics are
// updated here afterwards. Eval: oneDNN reads the running statistics
// (use_global_stats) and the mean/var outputs receive copies of them.
#include "kernels/cpu/batchnorm.hpp"

#include <cstring>

#include "kernels/cpu/dnnl_util.hpp"

namespace memfit::kernels::cpu {
namespace {

using dnnl::normalization_flags;
using dnnl::prop_kind;

normalization_flags bn_flags(const BatchNormParams& p) {
  normalization_flags f = normalization_flags::use_scale | normalization_flags::use_shift;
  if (!p.training) f = f | normalization_flags::use_global_stats;
  return f;
}

dnnl::memory::desc bn_data(const BatchNormParams& p) { return plain_f32({p.N, p.C, p.HW, 1}); }

dnnl::batch_normalization_forward::primitive_desc bn_fwd_pd(const BatchNormParams& p) {
  dnnl::batch_normalization_forward::desc desc(p.training ? prop_kind::forward_training : prop_kind::forward_inference,
                                               bn_data(p), static_cast<float>(p.eps), bn_flags(p));
  return {desc, user_scratchpad_attr(), engine()};
}

// in: x, gamma, beta, running_mean, running_var  out: y, mean, var
class BatchNormFwd final : public Kernel {
 public:
  explicit BatchNormFwd(const BatchNormParams& p) : p_(p), data_(bn_data(p)), chan_(plain_f32({p.C})), pd_(bn_fwd_pd(p)) {
    call_.set(dnnl::batch_normalization_forward(pd_));
  }
  const char* name() const override { return "dnnl.batch_norm"; }
  size_t scratch_bytes() const override { return scratchpad_bytes(pd_); }
  void run(const StepContext&) override {
    call_.run();
    const int64_t C = p_.C;
    if (!p_.training) {
      std::memcpy(out<float>(1), in<float>(3), static_cast<size_t>(C) * sizeof(float));
      std::memcpy(out<float>(2), in<float>(4), static_cast<size_t>(C) * sizeof(float));
      return;
    }
    if (!p_.update_stats) return;
    // Running statistics, in double as the reference computes them:
    // rm = (1-m) rm + m mean, rv = (1-m) rv + m var n/(n-1).
    const float* mean = out<float>(1);
    const float* var = out<float>(2);
    float* rm = in<float>(3);
    float* rv = in<float>(4);
    const double n = static_cast<double>(p_.N * p_.HW), m = p_.momentum;
    for (int64_t c = 0; c < C; ++c) {
      rm[c] = static_cast<float>((1.0 - m) * static_cast<double>(rm[c]) + m * static_cast<double>(mean[c]));
      rv[c] = static_cast<float>((1.0 - m) * static_cast<double>(rv[c]) + m * static_cast<double>(var[c]) * n / (n - 1.0));
    }
  }

 private:
  void on_bind() override {
    call_.clear_args();
    call_.arg(DNNL_ARG_SRC, data_, in_[0]);
    call_.arg(DNNL_ARG_SCALE, chan_, in_[1]);
    call_.arg(DNNL_ARG_SHIFT, chan_, in_[2]);
    // Training: the primitive writes the batch statistics to the outputs.
    // Eval: it reads the running statistics.
    call_.arg(DNNL_ARG_MEAN, chan_, p_.training ? out_[1] : in_[3]);
    call_.arg(DNNL_ARG_VARIANCE, chan_, p_.training ? out_[2] : in_[4]);
    call_.arg(DNNL_ARG_DST, data_, out_[0]);
    call_.arg(DNNL_ARG_SCRATCHPAD, pd_.scratchpad_desc(), scratch_);
  }
  BatchNormParams p_;
  dnnl::memory::desc data_, chan_;
  dnnl::batch_normalization_forward::primitive_desc pd_;
  Call call_;
};

// in: x, dy, gamma, mean, var  out: dx, dgamma, dbeta
class BatchNormBwd final : public Kernel {
 public:
  explicit BatchNormBwd(const BatchNormParams& p) : data_(bn_data(p)), chan_(plain_f32({p.C})) {
    dnnl::batch_normalization_backward::desc desc(prop_kind::backward, data_, data_, static_cast<float>(p.eps),
                                                  bn_flags(p));
    pd_ = {desc, user_scratchpad_attr(), engine(), bn_fwd_pd(p)};
    call_.set(dnnl::batch_normalization_backward(pd_));
  }
  const char* name() const override { return "dnnl.batch_norm_bwd"; }
  size_t scratch_bytes() const override { return scratchpad_bytes(pd_); }
  void run(const StepContext&) override { call_.run(); }

 private:
  void on_bind() override {
    call_.clear_args();
    call_.arg(DNNL_ARG_SRC, data_, in_[0]);
    call_.arg(DNNL_ARG_DIFF_DST, data_, in_[1]);
    call_.arg(DNNL_ARG_SCALE, chan_, in_[2]);
    // oneDNN 2.6 requires a shift argument whenever use_shift is set, though
    // the backward never reads it: gamma's buffer stands in (read-only).
    call_.arg(DNNL_ARG_SHIFT, chan_, in_[2]);
    call_.arg(DNNL_ARG_MEAN, chan_, in_[3]);
    call_.arg(DNNL_ARG_VARIANCE, chan_, in_[4]);
    call_.arg(DNNL_ARG_DIFF_SRC, data_, out_[0]);
    call_.arg(DNNL_ARG_DIFF_SCALE, chan_, out_[1]);
    call_.arg(DNNL_ARG_DIFF_SHIFT, chan_, out_[2]);
    call_.arg(DNNL_ARG_SCRATCHPAD, pd_.scratchpad_desc(), scratch_);
  }
  dnnl::memory::desc data_, chan_;
  dnnl::batch_normalization_backward::primitive_desc pd_;
  Call call_;
};

}  // namespace

std::unique_ptr<Kernel> make_batch_norm(const BatchNormParams& p) { return try_make<BatchNormFwd, Kernel>(p); }
std::unique_ptr<Kernel> make_batch_norm_bwd(const BatchNormParams& p) { return try_make<BatchNormBwd, Kernel>(p); }

}  // namespace memfit::kernels::cpu
