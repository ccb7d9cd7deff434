// Fast CPU lowering of softmax and softmax_bwd (ops/softmax/cpu.hpp).
#include "ops/common/lower_last_axis.hpp"
#include "ops/common/params_of_last_axis.hpp"
#include "ops/softmax/cpu.hpp"

namespace memfit {

void register_softmax_cpu_kernels() {
  lower_last_axis_cpu("softmax", softmax_params, kernels::cpu::make_softmax);
  lower_last_axis_cpu("softmax_bwd", softmax_params, kernels::cpu::make_softmax_bwd);
}

}  // namespace memfit
