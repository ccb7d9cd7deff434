#include "ops/rnn/cpu.hpp"
#include "ops/rnn/params_of.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"

namespace memfit {

void register_rnn_cpu_kernels() {
  using KPtr = std::unique_ptr<kernels::Kernel>;
  // f32 only: other storage runs the reference between conversions.
  register_cpu_kernel("rnn", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    if (!all_f32(g, n)) return nullptr;
    return kernels::cpu::make_rnn(rnn_params(g, n));
  });
  register_cpu_kernel("rnn_bwd", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    if (!all_f32(g, n)) return nullptr;
    return kernels::cpu::make_rnn_bwd(rnn_params(g, n));
  });
}

}  // namespace memfit
