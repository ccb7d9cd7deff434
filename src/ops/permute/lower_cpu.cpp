#include "ops/permute/cpu.hpp"
#include "ops/permute/params_of.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"

namespace memfit {

void register_permute_cpu_kernels() {
  using KPtr = std::unique_ptr<kernels::Kernel>;
  // A copy: the Cpu backend stores every type at its own size, which is all
  // the kernel needs to know.
  register_cpu_kernel("permute", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    return kernels::cpu::make_permute(permute_params(g, n), dtype_size(g.value(n.outputs[0]).dtype));
  });
}

}  // namespace memfit
