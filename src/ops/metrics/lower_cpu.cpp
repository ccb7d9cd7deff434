// Fast CPU lowering of the evaluation metrics (ops/metrics/cpu.hpp).
#include "ops/metrics/cpu.hpp"
#include "ops/metrics/params_of.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"

namespace memfit {

void register_metrics_cpu_kernels() {
  register_cpu_kernel("xent_metrics", [](const LoweredGraph& lg, NodeId id) -> std::unique_ptr<kernels::Kernel> {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    if (!all_f32(g, n)) return nullptr;
    return kernels::cpu::make_xent_metrics(metrics_params(g, n));
  });
}

}  // namespace memfit
