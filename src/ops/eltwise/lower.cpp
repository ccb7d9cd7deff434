#include "ops/eltwise/ref.hpp"
#include "runtime/lower/lower_util.hpp"
#include "runtime/mixed.hpp"

namespace memfit {

void register_eltwise_ref_kernels() {
  auto n_of = [](const Graph& g, const Node& n) { return numel(g.value(n.outputs[0]).shape); };
  register_kernel("relu", [=](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    return make_ref<kernels::ref::Relu>(lg, kernels::EltwiseParams{n_of(g, n)});
  });
  register_kernel("relu_bwd", [=](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    return make_ref<kernels::ref::ReluBwd>(lg, kernels::EltwiseParams{n_of(g, n)});
  });
  register_kernel("add", [=](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    return make_ref<kernels::ref::Add>(lg, kernels::EltwiseParams{n_of(g, n)});
  });
  register_kernel("scale", [=](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    return make_ref<kernels::ref::Scale>(lg, kernels::EltwiseParams{n_of(g, n), n.attrs.f("alpha")});
  });
  register_kernel("fill", [=](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    return make_ref<kernels::ref::Fill>(lg, kernels::FillParams{n_of(g, n), n.attrs.f("value")});
  });
  register_kernel("cast", [](const LoweredGraph& lg, NodeId id) {
    return make_cast_kernel(lg, id);
  });
}

}  // namespace memfit
