#include "kernels/ref/optim.hpp"
#include "runtime/lower/lower_util.hpp"
#include "runtime/lower/params_of.hpp"

namespace memfit {

void register_optim_kernels() {
  register_kernel("sgd_update", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Backend b = lg.backend();
    kernels::SgdParams p;
    fill_optimizer_params(g, n, p);
    p.momentum = n.attrs.f("momentum");
    p.nesterov = n.attrs.i("nesterov") != 0;
    return make_ref<kernels::ref::SgdUpdate>(b, p);
  });
  register_kernel("grad_accumulate", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Backend b = lg.backend();
    return make_ref<kernels::ref::GradAccumulate>(b, kernels::EltwiseParams{numel(g.value(n.inputs[0]).shape)});
  });
  register_kernel("adam_update", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Backend b = lg.backend();
    kernels::AdamParams p;
    fill_optimizer_params(g, n, p);
    p.beta1 = n.attrs.f("beta1");
    p.beta2 = n.attrs.f("beta2");
    p.eps = n.attrs.f("eps");
    p.decoupled = n.attrs.s("kind") == "adamw";
    return make_ref<kernels::ref::AdamUpdate>(b, p);
  });
}

}  // namespace memfit
