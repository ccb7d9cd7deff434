// Fast CPU lowering of activation and activation_bwd (ops/activation/cpu.hpp)
// for f32 or bf16 activations; f16, or bf16 in a build without the bf16
// loops, falls back to the reference kernel between conversions.
#include "ops/activation/cpu.hpp"
#include "ops/activation/params_of.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"

namespace memfit {

void register_activation_cpu_kernels() {
  using KPtr = std::unique_ptr<kernels::Kernel>;
  register_cpu_kernel("activation", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const auto act = cpu_act(lg.graph(), lg.node(id));
    return act ? kernels::cpu::make_activation(activation_params(lg.graph(), lg.node(id)), *act) : nullptr;
  });
  register_cpu_kernel("activation_bwd", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const auto act = cpu_act(lg.graph(), lg.node(id));
    return act ? kernels::cpu::make_activation_bwd(activation_params(lg.graph(), lg.node(id)), *act) : nullptr;
  });
}

}  // namespace memfit
