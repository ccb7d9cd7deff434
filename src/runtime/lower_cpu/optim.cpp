#include "kernels/cpu/optim.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"
#include "runtime/lower/params_of.hpp"

namespace memfit {

void register_cpu_optim_kernels() {
  using KPtr = std::unique_ptr<kernels::Kernel>;
  register_cpu_kernel("sgd_update", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    if (!all_f32(g, n)) return nullptr;
    kernels::SgdParams p;
    fill_optimizer_params(g, n, p);
    p.momentum = n.attrs.f("momentum");
    p.nesterov = n.attrs.i("nesterov") != 0;
    return kernels::cpu::make_sgd_update(p);
  });
  register_cpu_kernel("adam_update", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    if (!all_f32(g, n)) return nullptr;
    kernels::AdamParams p;
    fill_optimizer_params(g, n, p);
    p.beta1 = n.attrs.f("beta1");
    p.beta2 = n.attrs.f("beta2");
    p.eps = n.attrs.f("eps");
    p.decoupled = n.attrs.s("kind") == "adamw";
    return kernels::cpu::make_adam_update(p);
  });
}

}  // namespace memfit
