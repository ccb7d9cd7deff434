#include "ops/linear/params_of.hpp"
#include "ops/linear/ref.hpp"
#include "runtime/lower/lower_util.hpp"

namespace memfit {

void register_linear_ref_kernels() {
  // x[..., K] is viewed as [M, K].
  register_kernel("linear", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Shape& x = shape_of(g, n.inputs[0]);
    const Shape& w = shape_of(g, n.inputs[1]);
    kernels::LinearParams p{numel(x) / x.back(), x.back(), w[0], n.inputs.size() == 3};
    return make_ref<kernels::ref::Linear>(lg, p);
  });
  register_kernel("linear_bwd_data", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Shape& dy = shape_of(g, n.inputs[0]);
    const Shape& w = shape_of(g, n.inputs[1]);
    kernels::LinearParams p{numel(dy) / dy.back(), w[1], w[0], false};
    return make_ref<kernels::ref::LinearBwdData>(lg, p);
  });
  register_kernel("linear_bwd_weight", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Shape& x = shape_of(g, n.inputs[0]);
    const Shape& dy = shape_of(g, n.inputs[1]);
    kernels::LinearParams p{numel(x) / x.back(), x.back(), dy.back(), n.attrs.i("bias", 0) != 0};
    return make_ref<kernels::ref::LinearBwdWeight>(lg, p);
  });
  register_kernel("matmul", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const kernels::MatmulParams p = matmul_params(g, n);
    return make_ref<kernels::ref::Matmul>(lg, p);
  });
}

}  // namespace memfit
