// N batch, C input channels, H/W input size, K output channels, R/S kernel
// size, G groups, OH/OW output size.
//
// Padding is symmetric (pad_l = pad_r = pad): oneDNN's output size
// (H + 2 pad - dil (R-1) - 1) / stride + 1 is then the graph's. oneDNN counts
// dilation from 0 (no dilation), the graph from 1.
//
// Layouts: the primitives are made with format_tag::any for data and weights,
// and RelayoutKernel reorders between the graph's plain buffers and oneDNN's
// blocked layouts in scratch. Measured on AVX-512 (one thread, batch 16-64):
// the blocked direct kernels (jit:avx512_core, jit_1x1, jit_dw) beat the plain
// im2col+gemm ones (gemm:jit) 1.3-3x (20x for depthwise), reorders included.
// The one exception is backward-data with few input channels (C < 16, no
// groups: 2.5-11x slower blocked), which keeps the plain layouts. The price is
// scratch: a blocked copy of each reordered operand (while the plain gemm
// path needs an im2col buffer per thread instead).
//
// The graph's activations (src/dst) may themselves be blocked (Layout
// Blocked16, nChw16c): when the primitive computes in that layout, the
// operand needs no reorder and no scratch copy.
#include "kernels/cpu/conv.hpp"

#include "kernels/cpu/dnnl_util.hpp"

namespace memfit::kernels::cpu {
namespace {

using dnnl::algorithm;
using dnnl::prop_kind;
using tag = dnnl::memory::format_tag;

struct ConvDescs {
  dnnl::memory::desc src, wei, bias, dst;  // the graph's layouts
  dims src_dims, wei_dims, dst_dims;
  dims strides, dilates, pad;
};

dnnl::memory::desc data_desc(const dims& d, Layout l) {
  return l == Layout::Plain ? plain_f32(d) : dnnl::memory::desc(d, dnnl::memory::data_type::f32, tag::nChw16c);
}

ConvDescs conv_descs(const ConvParams& p, Layout src, Layout dst) {
  ConvDescs d;
  d.src_dims = {p.N, p.C, p.H, p.W};
  // [K, C/G, R, S] is the same memory as oneDNN's grouped [G, K/G, C/G, R, S].
  d.wei_dims = p.groups > 1 ? dims{p.groups, p.K / p.groups, p.C / p.groups, p.R, p.S} : dims{p.K, p.C, p.R, p.S};
  d.dst_dims = {p.N, p.K, p.OH, p.OW};
  d.src = data_desc(d.src_dims, src);
  d.wei = plain_f32(d.wei_dims);
  d.bias = p.bias ? plain_f32({p.K}) : dnnl::memory::desc();
  d.dst = data_desc(d.dst_dims, dst);
  d.strides = {p.stride_h, p.stride_w};
  d.dilates = {p.dil_h - 1, p.dil_w - 1};
  d.pad = {p.pad_h, p.pad_w};
  return d;
}

// Descriptors the primitive is created with: plain, or "any" to let oneDNN
// pick its layouts.
struct Chosen {
  dnnl::memory::desc src, wei, dst;
};
Chosen choose(const ConvDescs& d, bool any) {
  if (!any) return {plain_f32(d.src_dims), d.wei, plain_f32(d.dst_dims)};
  auto a = [](const dims& x) { return dnnl::memory::desc(x, dnnl::memory::data_type::f32, tag::any); };
  return {a(d.src_dims), a(d.wei_dims), a(d.dst_dims)};
}

dnnl::convolution_forward::primitive_desc fwd_pd(const ConvDescs& d, const Chosen& c, bool with_bias) {
  dnnl::convolution_forward::desc desc(prop_kind::forward_training, algorithm::convolution_direct, c.src, c.wei,
                                       with_bias ? d.bias : dnnl::memory::desc(), c.dst, d.strides, d.dilates,
                                       d.pad, d.pad);
  return {desc, user_scratchpad_attr(), engine()};
}

// in: x, w (, b)  out: y
class ConvFwd final : public RelayoutKernel {
 public:
  ConvFwd(const ConvParams& p, Layout x, Layout y) {
    const ConvDescs d = conv_descs(p, x, y);
    auto pd = fwd_pd(d, choose(d, true), p.bias);
    std::vector<Operand> ops{{DNNL_ARG_SRC, true, 0, d.src, pd.src_desc()},
                             {DNNL_ARG_WEIGHTS, true, 1, d.wei, pd.weights_desc()},
                             {DNNL_ARG_DST, false, 0, d.dst, pd.dst_desc()}};
    if (p.bias) ops.push_back({DNNL_ARG_BIAS, true, 2, d.bias, d.bias});
    setup(dnnl::convolution_forward(pd), pd.scratchpad_desc(), std::move(ops));
  }
  const char* name() const override { return "dnnl.conv2d"; }
};

// in: dy, w  out: dx
class ConvBwdData final : public RelayoutKernel {
 public:
  ConvBwdData(const ConvParams& p, Layout dy, Layout dx) {
    const ConvDescs d = conv_descs(p, dx, dy);
    const Chosen c = choose(d, p.groups > 1 || p.C >= 16);
    dnnl::convolution_backward_data::desc desc(algorithm::convolution_direct, c.src, c.wei, c.dst, d.strides,
                                               d.dilates, d.pad, d.pad);
    dnnl::convolution_backward_data::primitive_desc pd(desc, user_scratchpad_attr(), engine(), fwd_pd(d, c, false));
    setup(dnnl::convolution_backward_data(pd), pd.scratchpad_desc(),
          {{DNNL_ARG_DIFF_DST, true, 0, d.dst, pd.diff_dst_desc()},
           {DNNL_ARG_WEIGHTS, true, 1, d.wei, pd.weights_desc()},
           {DNNL_ARG_DIFF_SRC, false, 0, d.src, pd.diff_src_desc()}});
  }
  const char* name() const override { return "dnnl.conv2d_bwd_data"; }
};

// in: x, dy  out: dw (, db)
class ConvBwdWeight final : public RelayoutKernel {
 public:
  ConvBwdWeight(const ConvParams& p, Layout x, Layout dy) {
    const ConvDescs d = conv_descs(p, x, dy);
    const Chosen c = choose(d, true);
    dnnl::convolution_backward_weights::desc desc(algorithm::convolution_direct, c.src, c.wei, d.bias, c.dst,
                                                  d.strides, d.dilates, d.pad, d.pad);
    dnnl::convolution_backward_weights::primitive_desc pd(desc, user_scratchpad_attr(), engine(),
                                                          fwd_pd(d, c, p.bias));
    std::vector<Operand> ops{{DNNL_ARG_SRC, true, 0, d.src, pd.src_desc()},
                             {DNNL_ARG_DIFF_DST, true, 1, d.dst, pd.diff_dst_desc()},
                             {DNNL_ARG_DIFF_WEIGHTS, false, 0, d.wei, pd.diff_weights_desc()}};
    if (p.bias) ops.push_back({DNNL_ARG_DIFF_BIAS, false, 1, d.bias, pd.diff_bias_desc()});
    setup(dnnl::convolution_backward_weights(pd), pd.scratchpad_desc(), std::move(ops));
  }
  const char* name() const override { return "dnnl.conv2d_bwd_weight"; }
};

}  // namespace

std::unique_ptr<Kernel> make_conv2d(const ConvParams& p, Layout x, Layout y) {
  return try_make<ConvFwd, Kernel>(p, x, y);
}
std::unique_ptr<Kernel> make_conv2d_bwd_data(const ConvParams& p, Layout dy, Layout dx) {
  return try_make<ConvBwdData, Kernel>(p, dy, dx);
}
std::unique_ptr<Kernel> make_conv2d_bwd_weight(const ConvParams& p, Layout x, Layout dy) {
  return try_make<ConvBwdWeight, Kernel>(p, x, dy);
}

}  // namespace memfit::kernels::cpu
