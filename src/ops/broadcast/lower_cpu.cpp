// Fast CPU lowering of add_broadcast and sum_leading (ops/broadcast/cpu.hpp),
// f32 storage; bf16/fp16 nodes run the reference kernel between conversions.
#include "ops/broadcast/cpu.hpp"
#include "ops/broadcast/params_of.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"

namespace memfit {

void register_broadcast_cpu_kernels() {
  using KPtr = std::unique_ptr<kernels::Kernel>;
  register_cpu_kernel("add_broadcast", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    if (!all_f32(lg.graph(), lg.node(id))) return nullptr;
    return kernels::cpu::make_add_broadcast(broadcast_params(lg.graph(), lg.node(id)));
  });
  register_cpu_kernel("sum_leading", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    if (!all_f32(lg.graph(), lg.node(id))) return nullptr;
    return kernels::cpu::make_sum_leading(broadcast_params(lg.graph(), lg.node(id)));
  });
}

}  // namespace memfit
