// N batch, C input channels, H/W input size, K output channels, R/S kernel
// size, G groups, OH/OW output size.
//
// Padding is symmetric (pad_l = pad_r = pad): oneDNN's output size
// (H + 2 pad - dil (R-1) - 1) / stride + 1 is then the graph's. oneDNN counts
// dilation from 0 (no dilation), the graph from 1.
#include "kernels/cpu/conv.hpp"

#include "kernels/cpu/dnnl_util.hpp"

namespace memfit::kernels::cpu {
namespace {

using dnnl::algorithm;
using dnnl::prop_kind;

struct ConvDescs {
  dnnl::memory::desc src, wei, bias, dst;
  dims strides, dilates, pad;
};

ConvDescs conv_descs(const ConvParams& p) {
  ConvDescs d;
  d.src = plain_f32({p.N, p.C, p.H, p.W});
  // [K, C/G, R, S] is the same memory as oneDNN's grouped [G, K/G, C/G, R, S].
  d.wei = p.groups > 1 ? plain_f32({p.groups, p.K / p.groups, p.C / p.groups, p.R, p.S})
                       : plain_f32({p.K, p.C, p.R, p.S});
  d.bias = p.bias ? plain_f32({p.K}) : dnnl::memory::desc();
  d.dst = plain_f32({p.N, p.K, p.OH, p.OW});
  d.strides = {p.stride_h, p.stride_w};
  d.dilates = {p.dil_h - 1, p.dil_w - 1};
  d.pad = {p.pad_h, p.pad_w};
  return d;
}

dnnl::convolution_forward::primitive_desc fwd_pd(const ConvDescs& d, bool with_bias) {
  dnnl::convolution_forward::desc desc(prop_kind::forward_training, algorithm::convolution_direct, d.src, d.wei,
                                       with_bias ? d.bias : dnnl::memory::desc(), d.dst, d.strides, d.dilates,
                                       d.pad, d.pad);
  return {desc, user_scratchpad_attr(), engine()};
}

class ConvFwd final : public Kernel {
 public:
  explicit ConvFwd(const ConvParams& p) : p_(p), d_(conv_descs(p)), pd_(fwd_pd(d_, p.bias)) {
    call_.set(dnnl::convolution_forward(pd_));
  }
  const char* name() const override { return "dnnl.conv2d"; }
  size_t scratch_bytes() const override { return scratchpad_bytes(pd_); }
  void run(const StepContext&) override { call_.run(); }

 private:
  void on_bind() override {
    call_.clear_args();
    call_.arg(DNNL_ARG_SRC, d_.src, in_[0]);
    call_.arg(DNNL_ARG_WEIGHTS, d_.wei, in_[1]);
    if (p_.bias) call_.arg(DNNL_ARG_BIAS, d_.bias, in_[2]);
    call_.arg(DNNL_ARG_DST, d_.dst, out_[0]);
    call_.arg(DNNL_ARG_SCRATCHPAD, pd_.scratchpad_desc(), scratch_);
  }
  ConvParams p_;
  ConvDescs d_;
  dnnl::convolution_forward::primitive_desc pd_;
  Call call_;
};

class ConvBwdData final : public Kernel {
 public:
  explicit ConvBwdData(const ConvParams& p) : d_(conv_descs(p)) {
    dnnl::convolution_backward_data::desc desc(algorithm::convolution_direct, d_.src, d_.wei, d_.dst, d_.strides,
                                               d_.dilates, d_.pad, d_.pad);
    pd_ = {desc, user_scratchpad_attr(), engine(), fwd_pd(d_, false)};
    call_.set(dnnl::convolution_backward_data(pd_));
  }
  const char* name() const override { return "dnnl.conv2d_bwd_data"; }
  size_t scratch_bytes() const override { return scratchpad_bytes(pd_); }
  void run(const StepContext&) override { call_.run(); }

 private:
  void on_bind() override {
    call_.clear_args();
    call_.arg(DNNL_ARG_DIFF_DST, d_.dst, in_[0]);
    call_.arg(DNNL_ARG_WEIGHTS, d_.wei, in_[1]);
    call_.arg(DNNL_ARG_DIFF_SRC, d_.src, out_[0]);
    call_.arg(DNNL_ARG_SCRATCHPAD, pd_.scratchpad_desc(), scratch_);
  }
  ConvDescs d_;
  dnnl::convolution_backward_data::primitive_desc pd_;
  Call call_;
};

class ConvBwdWeight final : public Kernel {
 public:
  explicit ConvBwdWeight(const ConvParams& p) : p_(p), d_(conv_descs(p)) {
    dnnl::convolution_backward_weights::desc desc(algorithm::convolution_direct, d_.src, d_.wei, d_.bias, d_.dst,
                                                  d_.strides, d_.dilates, d_.pad, d_.pad);
    pd_ = {desc, user_scratchpad_attr(), engine(), fwd_pd(d_, p.bias)};
    call_.set(dnnl::convolution_backward_weights(pd_));
  }
  const char* name() const override { return "dnnl.conv2d_bwd_weight"; }
  size_t scratch_bytes() const override { return scratchpad_bytes(pd_); }
  void run(const StepContext&) override { call_.run(); }

 private:
  void on_bind() override {
    call_.clear_args();
    call_.arg(DNNL_ARG_SRC, d_.src, in_[0]);
    call_.arg(DNNL_ARG_DIFF_DST, d_.dst, in_[1]);
    call_.arg(DNNL_ARG_DIFF_WEIGHTS, d_.wei, out_[0]);
    if (p_.bias) call_.arg(DNNL_ARG_DIFF_BIAS, d_.bias, out_[1]);
    call_.arg(DNNL_ARG_SCRATCHPAD, pd_.scratchpad_desc(), scratch_);
  }
  ConvParams p_;
  ConvDescs d_;
  dnnl::convolution_backward_weights::primitive_desc pd_;
  Call call_;
};

}  // namespace

std::unique_ptr<Kernel> make_conv2d(const ConvParams& p) { return try_make<ConvFwd, Kernel>(p); }
std::unique_ptr<Kernel> make_conv2d_bwd_data(const ConvParams& p) { return try_make<ConvBwdData, Kernel>(p); }
std::unique_ptr<Kernel> make_conv2d_bwd_weight(const ConvParams& p) { return try_make<ConvBwdWeight, Kernel>(p); }

}  // namespace memfit::kernels::cpu
