#include "ops/pool/params_of.hpp"
#include "ops/pool/ref.hpp"
#include "runtime/lower/lower_util.hpp"

namespace memfit {

void register_pool_ref_kernels() {
  register_kernel("max_pool2d", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    return make_ref<kernels::ref::MaxPool2d>(lg, pool_params(n, shape_of(g, n.inputs[0]), shape_of(g, n.outputs[0])));
  });
  register_kernel("max_pool2d_bwd", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    return make_ref<kernels::ref::MaxPool2dBwd>(lg, pool_params(n, n.attrs.ints("x_shape"), shape_of(g, n.inputs[0])));
  });
  register_kernel("avg_pool2d", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    return make_ref<kernels::ref::AvgPool2d>(lg, pool_params(n, shape_of(g, n.inputs[0]), shape_of(g, n.outputs[0])));
  });
  register_kernel("avg_pool2d_bwd", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    return make_ref<kernels::ref::AvgPool2dBwd>(lg, pool_params(n, n.attrs.ints("x_shape"), shape_of(g, n.inputs[0])));
  });
  register_kernel("global_avg_pool", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Shape& x = shape_of(g, n.inputs[0]);
    return make_ref<kernels::ref::GlobalAvgPool>(lg, kernels::GlobalPoolParams{x[0], x[1], x[2] * x[3]});
  });
  register_kernel("global_avg_pool_bwd", [](const LoweredGraph& lg, NodeId id) {
    const Node& n = lg.node(id);
    const Shape& x = n.attrs.ints("x_shape");
    return make_ref<kernels::ref::GlobalAvgPoolBwd>(lg, kernels::GlobalPoolParams{x[0], x[1], x[2] * x[3]});
  });
}

}  // namespace memfit
