// Kernel parameters of the convolution family (conv2d and its backward ops) from a graph node, shared by the
// reference lowering (ops/conv/lower.cpp) and the fast CPU lowering
// (ops/conv/lower_cpu.cpp) so the two cannot drift apart.
#pragma once

#include "memfit/graph.hpp"
#include "ops/conv/params.hpp"

namespace memfit {

// x[N,C,H,W], w[K,C/G,R,S], y[N,K,OH,OW] and the node's attributes.
inline kernels::ConvParams conv_params(const Node& n, const Shape& x, const Shape& w, const Shape& y, bool bias) {
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

}  // namespace memfit
