#include "ops/eltwise/ref.hpp"
#include "runtime/lower/lower_util.hpp"
#include "runtime/mixed.hpp"

namespace memfit {

void register_eltwise_ref_kernels() {
  auto n_of = [](const Graph& g, const Node& n) { return numel(g.value(n.outputs[0]).shape); };
  register_kernel("relu", [=](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Backend b = lg.backend();
    return make_ref<kernels::ref::Relu>(b, kernels::EltwiseParams{n_of(g, n)});
  });
  register_kernel("relu_bwd", [=](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Backend b = lg.backend();
    return make_ref<kernels::ref::ReluBwd>(b, kernels::EltwiseParams{n_of(g, n)});
  });
  register_kernel("add", [=](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Backend b = lg.backend();
    return make_ref<kernels::ref::Add>(b, kernels::EltwiseParams{n_of(g, n)});
  });
  register_kernel("scale", [=](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Backend b = lg.backend();
    return make_ref<kernels::ref::Scale>(b, kernels::EltwiseParams{n_of(g, n), n.attrs.f("alpha")});
  });
  register_kernel("fill", [=](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Backend b = lg.backend();
    return make_ref<kernels::ref::Fill>(b, kernels::FillParams{n_of(g, n), n.attrs.f("value")});
  });
  register_kernel("cast", [](const LoweredGraph& lg, NodeId id) {
    return make_cast_kernel(lg.graph(), lg.node(id), lg.backend());
  });
}

}  // namespace memfit
