#include "kernels/ref/conv.hpp"
#include "runtime/lower/lower_util.hpp"

namespace memfit {
namespace {

// x[N,C,H,W], w[K,C/G,R,S], y[N,K,OH,OW] and the node's attributes.
kernels::ConvParams conv_params(const Node& n, const Shape& x, const Shape& w, const Shape& y, bool bias) {
  const auto& st = n.attrs.ints("stride");
  const auto& pd = n.attrs.ints("pad");
  const auto& dl = n.attrs.ints("dilation");
  kernels::ConvParams p{x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3]};
  p.stride_h = st[0];
  p.stride_w = st[1];
  p.pad_h = pd[0];
  p.pad_w = pd[1];
  p.dil_h = dl[0];
  p.dil_w = dl[1];
  p.groups = n.attrs.i("groups", 1);
  p.bias = bias;
  return p;
}

}  // namespace

void register_conv_kernels() {
  register_kernel("conv2d", [](const Graph& g, const Node& n, Backend b) {
    auto p = conv_params(n, shape_of(g, n.inputs[0]), shape_of(g, n.inputs[1]), shape_of(g, n.outputs[0]),
                         n.inputs.size() == 3);
    return make_ref<kernels::ref::Conv2d>(b, p);
  });
  // in: dy, w; the input shape comes from the attribute x_shape.
  register_kernel("conv2d_bwd_data", [](const Graph& g, const Node& n, Backend b) {
    auto p = conv_params(n, n.attrs.ints("x_shape"), shape_of(g, n.inputs[1]), shape_of(g, n.inputs[0]), false);
    return make_ref<kernels::ref::Conv2dBwdData>(b, p);
  });
  // in: x, dy; the weight shape comes from the attribute w_shape.
  register_kernel("conv2d_bwd_weight", [](const Graph& g, const Node& n, Backend b) {
    auto p = conv_params(n, shape_of(g, n.inputs[0]), n.attrs.ints("w_shape"), shape_of(g, n.inputs[1]),
                         n.attrs.i("bias", 0) != 0);
    return make_ref<kernels::ref::Conv2dBwdWeight>(b, p);
  });
}

}  // namespace memfit
