#include "ops/dropout/cpu.hpp"
#include "ops/dropout/params_of.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"

namespace memfit {
void register_dropout_cpu_kernels() {
  using KPtr = std::unique_ptr<kernels::Kernel>;
  register_cpu_kernel("dropout", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const auto act = cpu_act(g, n);
    if (!act) return nullptr;
    return kernels::cpu::make_dropout(dropout_params(g, n), *act);
  });
  register_cpu_kernel("dropout_bwd", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const auto act = cpu_act(g, n);
    if (!act) return nullptr;
    return kernels::cpu::make_dropout_bwd(dropout_params(g, n), *act);
  });
}

}  // namespace memfit
