// Fast CPU lowering of gelu and gelu_bwd (ops/gelu/cpu.hpp).
#include "ops/common/lower_last_axis.hpp"
#include "ops/common/params_of_last_axis.hpp"
#include "ops/gelu/cpu.hpp"

namespace memfit {

void register_gelu_cpu_kernels() {
  lower_last_axis_cpu("gelu", gelu_params, kernels::cpu::make_gelu);
  lower_last_axis_cpu("gelu_bwd", gelu_params, kernels::cpu::make_gelu_bwd);
}

}  // namespace memfit
