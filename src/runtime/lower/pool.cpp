#include "kernels/ref/pool.hpp"
#include "runtime/lower/lower_util.hpp"

namespace memfit {
namespace {

// x[N,C,H,W] (input) and y[N,C,OH,OW] (output) with the window attributes.
kernels::PoolParams pool_params(const Node& n, const Shape& x, const Shape& y) {
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

}  // namespace

void register_pool_kernels() {
  register_kernel("max_pool2d", [](const Graph& g, const Node& n, Backend b) {
    return make_ref<kernels::ref::MaxPool2d>(b, pool_params(n, shape_of(g, n.inputs[0]), shape_of(g, n.outputs[0])));
  });
  register_kernel("max_pool2d_bwd", [](const Graph& g, const Node& n, Backend b) {
    return make_ref<kernels::ref::MaxPool2dBwd>(b, pool_params(n, n.attrs.ints("x_shape"), shape_of(g, n.inputs[0])));
  });
  register_kernel("avg_pool2d", [](const Graph& g, const Node& n, Backend b) {
    return make_ref<kernels::ref::AvgPool2d>(b, pool_params(n, shape_of(g, n.inputs[0]), shape_of(g, n.outputs[0])));
  });
  register_kernel("avg_pool2d_bwd", [](const Graph& g, const Node& n, Backend b) {
    return make_ref<kernels::ref::AvgPool2dBwd>(b, pool_params(n, n.attrs.ints("x_shape"), shape_of(g, n.inputs[0])));
  });
  register_kernel("global_avg_pool", [](const Graph& g, const Node& n, Backend b) {
    const Shape& x = shape_of(g, n.inputs[0]);
    return make_ref<kernels::ref::GlobalAvgPool>(b, kernels::GlobalPoolParams{x[0], x[1], x[2] * x[3]});
  });
  register_kernel("global_avg_pool_bwd", [](const Graph&, const Node& n, Backend b) {
    const Shape& x = n.attrs.ints("x_shape");
    return make_ref<kernels::ref::GlobalAvgPoolBwd>(b, kernels::GlobalPoolParams{x[0], x[1], x[2] * x[3]});
  });
}

}  // namespace memfit
