#include "kernels/ref/optim.hpp"
#include "runtime/lower/lower_util.hpp"
#include "runtime/lower/params_of.hpp"

namespace memfit {

void register_optim_kernels() {
  register_kernel("sgd_update", [](const Graph& g, const Node& n, Backend b) {
    kernels::SgdParams p;
    fill_optimizer_params(g, n, p);
    p.momentum = n.attrs.f("momentum");
    p.nesterov = n.attrs.i("nesterov") != 0;
    return make_ref<kernels::ref::SgdUpdate>(b, p);
  });
  register_kernel("grad_accumulate", [](const Graph& g, const Node& n, Backend b) {
    return make_ref<kernels::ref::GradAccumulate>(b, kernels::EltwiseParams{numel(g.value(n.inputs[0]).shape)});
  });
  register_kernel("adam_update", [](const Graph& g, const Node& n, Backend b) {
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
