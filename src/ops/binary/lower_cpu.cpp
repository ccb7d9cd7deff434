// Fast CPU lowering of binary and binary_bwd (ops/binary/cpu.hpp) for f32
// activations; other types run the reference kernel (between conversions
// for bf16/f16).
#include "ops/binary/cpu.hpp"
#include "ops/binary/params_of.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"

namespace memfit {

void register_binary_cpu_kernels() {
  using KPtr = std::unique_ptr<kernels::Kernel>;
  register_cpu_kernel("binary", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    if (!all_f32(lg.graph(), lg.node(id))) return nullptr;
    return kernels::cpu::make_binary(binary_params(lg.graph(), lg.node(id)));
  });
  register_cpu_kernel("binary_bwd", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    if (!all_f32(lg.graph(), lg.node(id))) return nullptr;
    return kernels::cpu::make_binary_bwd(binary_params(lg.graph(), lg.node(id)));
  });
}

}  // namespace memfit
