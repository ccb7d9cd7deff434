#include "ops/loss/cpu.hpp"
#include "ops/loss/params_of.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"

namespace memfit {

void register_loss_cpu_kernels() {
  using KPtr = std::unique_ptr<kernels::Kernel>;
  register_cpu_kernel("softmax_xent", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    if (!all_f32(g, n)) return nullptr;
    return kernels::cpu::make_softmax_xent(xent_params(g, n));
  });
  register_cpu_kernel("softmax_xent_bwd", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    if (!all_f32(g, n)) return nullptr;
    return kernels::cpu::make_softmax_xent_bwd(xent_params(g, n));
  });
}

}  // namespace memfit
