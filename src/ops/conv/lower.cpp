#include "ops/conv/params_of.hpp"
#include "ops/conv/ref.hpp"
#include "runtime/lower/lower_util.hpp"

namespace memfit {

void register_conv_ref_kernels() {
  register_kernel("conv2d", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    auto p = conv_params(n, shape_of(g, n.inputs[0]), shape_of(g, n.inputs[1]), shape_of(g, n.outputs[0]),
                         n.inputs.size() == 3);
    return make_ref<kernels::ref::Conv2d>(lg, p);
  });
  // in: dy, w; the input shape comes from the attribute x_shape.
  register_kernel("conv2d_bwd_data", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    auto p = conv_params(n, n.attrs.ints("x_shape"), shape_of(g, n.inputs[1]), shape_of(g, n.inputs[0]), false);
    return make_ref<kernels::ref::Conv2dBwdData>(lg, p);
  });
  // in: x, dy; the weight shape comes from the attribute w_shape.
  register_kernel("conv2d_bwd_weight", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    auto p = conv_params(n, shape_of(g, n.inputs[0]), n.attrs.ints("w_shape"), shape_of(g, n.inputs[1]),
                         n.attrs.i("bias", 0) != 0);
    return make_ref<kernels::ref::Conv2dBwdWeight>(lg, p);
  });
}

}  // namespace memfit
