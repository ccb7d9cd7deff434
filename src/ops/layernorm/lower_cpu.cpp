// Fast CPU lowering of layer_norm and layer_norm_bwd (ops/layernorm/cpu.hpp).
#include "ops/common/lower_last_axis.hpp"
#include "ops/common/params_of_last_axis.hpp"
#include "ops/layernorm/cpu.hpp"

namespace memfit {

void register_layernorm_cpu_kernels() {
  lower_last_axis_cpu("layer_norm", layer_norm_params, kernels::cpu::make_layer_norm);
  lower_last_axis_cpu("layer_norm_bwd", layer_norm_params, kernels::cpu::make_layer_norm_bwd);
}

}  // namespace memfit
