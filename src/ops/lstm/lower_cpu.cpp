#include "ops/lstm/cpu.hpp"
#include "ops/lstm/params_of.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"

namespace memfit {

void register_lstm_cpu_kernels() {
  using KPtr = std::unique_ptr<kernels::Kernel>;
  // f32 only: other storage runs the reference between conversions.
  register_cpu_kernel("lstm", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    if (!all_f32(g, n)) return nullptr;
    return kernels::cpu::make_lstm(lstm_params(g, n));
  });
  register_cpu_kernel("lstm_bwd", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    if (!all_f32(g, n)) return nullptr;
    return kernels::cpu::make_lstm_bwd(lstm_params(g, n));
  });
}

}  // namespace memfit
