// Reference lowering of gelu and gelu_bwd.
#include "ops/common/lower_last_axis.hpp"
#include "ops/common/params_of_last_axis.hpp"
#include "ops/gelu/ref.hpp"

namespace memfit {

void register_gelu_ref_kernels() {
  lower_last_axis_ref<kernels::ref::Gelu>("gelu", gelu_params);
  lower_last_axis_ref<kernels::ref::GeluBwd>("gelu_bwd", gelu_params);
}

}  // namespace memfit
