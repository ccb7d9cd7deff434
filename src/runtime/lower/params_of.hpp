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

// x is [N, C] or [N, C, H, W]; the spatial axes fold into HW.
inline kernels::BatchNormParams bn_params(const Graph& g, const Node& n) {
  const Shape& x = g.value(n.inputs[0]).shape;
  kernels::BatchNormParams p{x[0], x[1], numel(x) / (x[0] * x[1])};
  p.eps = n.attrs.f("eps", 1e-5);
  p.momentum = n.attrs.f("momentum", 0.1);
  p.training = n.attrs.i("training", 1) != 0;
  p.update_stats = n.attrs.i("update_stats", 1) != 0;
  return p;
}

// a[..., M, K] x b[..., K, N] (trans flags swap an operand's last two axes);
// the leading axes fold into B, and an operand without them is broadcast.
inline kernels::MatmulParams matmul_params(const Graph& g, const Node& n) {
  const Shape& as = g.value(n.inputs[0]).shape;
  const Shape& bs = g.value(n.inputs[1]).shape;
  const Shape& cs = g.value(n.outputs[0]).shape;
  kernels::MatmulParams p;
  p.trans_a = n.attrs.i("trans_a", 0) != 0;
  p.trans_b = n.attrs.i("trans_b", 0) != 0;
  p.M = cs[cs.size() - 2];
  p.N = cs.back();
  p.K = p.trans_a ? as[as.size() - 2] : as.back();
  p.B = numel(cs) / (p.M * p.N);
  p.a_batch = as.size() == 2 ? 1 : p.B;
  p.b_batch = bs.size() == 2 ? 1 : p.B;
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
