// Kernel parameters derived from a graph node, shared by the reference
// lowering (runtime/lower/) and the fast CPU lowering (runtime/lower_cpu/) so
// the two cannot drift apart.
#pragma once

#include "kernels/params.hpp"
#include "memfit/graph.hpp"

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

// x[N,C,H,W] (input) and y[N,C,OH,OW] (output) with the window attributes.
inline kernels::PoolParams pool_params(const Node& n, const Shape& x, const Shape& y) {
  const auto& k = n.attrs.ints("kernel");
  const auto& st = n.attrs.ints("stride");
  const auto& pd = n.attrs.ints("pad");
  kernels::PoolParams p{x[0], x[1], x[2], x[3], y[2], y[3], k[0], k[1]};
  p.stride_h = st[0];
  p.stride_w = st[1];
  p.pad_h = pd[0];
  p.pad_w = pd[1];
  p.count_include_pad = n.attrs.i("count_include_pad", 1) != 0;
  return p;
}

// Per-tensor sizes and weight decay and the clipping norm of an optimizer
// update node (SgdParams, AdamParams).
template <class P>
void fill_optimizer_params(const Graph& g, const Node& n, P& p) {
  const int64_t k = n.attrs.i("count");
  const auto& decay = n.attrs.ints("decay");
  for (int64_t t = 0; t < k; ++t) {
    p.sizes.push_back(numel(g.value(n.inputs[static_cast<size_t>(t)]).shape));
    p.weight_decay.push_back(decay[static_cast<size_t>(t)] ? n.attrs.f("weight_decay") : 0.0);
  }
  p.clip_norm = n.attrs.f("clip_norm", 0.0);
}

}  // namespace memfit
