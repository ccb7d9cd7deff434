// The CPU device's own part of a graph's lowering (Device::prepare), which
// only the fast CPU factories (ops/<family>/lower_cpu.cpp) read: the layout
// its kernels keep each value in, and whether bf16 convolutions and linear
// layers compute in bf16.
#pragma once

#include <string>
#include <vector>

#include "kernels/cpu/layout.hpp"
#include "runtime/lowered.hpp"

namespace memfit {

class CpuLowering final : public DeviceLowering {
 public:
  // Per value: cpu_layouts(g) (runtime/lower_cpu/layout.hpp); every value
  // Plain in an f32 view and with blocked layouts off.
  std::vector<kernels::cpu::Layout> layouts;
  // bf16 products in bf16 (true) or in f32 between conversions: read once
  // per graph from kernels::cpu::bf16_convs_native() (bf16 graphs only).
  bool bf16_products_native = true;
  // The bf16 product path and each operand's layout.
  void sign(const LoweredGraph& lg, NodeId id, std::string& s) const override;
};

// lg's CPU lowering; nullptr where lg's device keeps none (a reference
// device, whose contexts a CPU factory never sees but a test may).
const CpuLowering* cpu_lowering(const LoweredGraph& lg);
// The layout of v in lg: Plain where lg has no CPU lowering.
kernels::cpu::Layout cpu_layout(const LoweredGraph& lg, ValueId v);
// Every value's layout (cpu_layout of each).
std::vector<kernels::cpu::Layout> cpu_value_layouts(const LoweredGraph& lg);
// The bf16 product path (true where lg has no CPU lowering).
bool bf16_products_native(const LoweredGraph& lg);

}  // namespace memfit
