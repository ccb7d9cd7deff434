// Fast CPU lowering of the row-wise cross-entropy (ops/xent_rows/cpu.hpp).
#include "ops/xent_rows/cpu.hpp"
#include "ops/xent_rows/params_of.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"

namespace memfit {

void register_xent_rows_cpu_kernels() {
  using KPtr = std::unique_ptr<kernels::Kernel>;
  register_cpu_kernel("xent_rows", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    if (!all_f32(g, n)) return nullptr;
    return kernels::cpu::make_xent_rows(xent_rows_params(g, n));
  });
  register_cpu_kernel("xent_rows_bwd", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    if (!all_f32(g, n)) return nullptr;
    return kernels::cpu::make_xent_rows_bwd(xent_rows_params(g, n));
  });
}

}  // namespace memfit
