// Kernel parameters of the pooling ops from a graph node, shared by the
// reference lowering (ops/pool/lower.cpp) and the fast CPU lowering
// (ops/pool/lower_cpu.cpp) so the two cannot drift apart.
#pragma once

#include "memfit/graph.hpp"
#include "ops/pool/params.hpp"

namespace memfit {

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
  const bool ceil = n.attrs.i("ceil", 0) != 0;
  if (ceil) {
    p.pad_h_end = (p.OH - 1) * p.stride_h + p.R - p.H - p.pad_h;
    p.pad_w_end = (p.OW - 1) * p.stride_w + p.S - p.W - p.pad_w;
  }
  p.count_include_pad = n.attrs.i("count_include_pad", 1) != 0;
  return p;
}

}  // namespace memfit
