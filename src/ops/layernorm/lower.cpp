// Reference lowering of layer_norm and layer_norm_bwd.
#include "ops/common/lower_last_axis.hpp"
#include "ops/common/params_of_last_axis.hpp"
#include "ops/layernorm/ref.hpp"

namespace memfit {

void register_layernorm_ref_kernels() {
  lower_last_axis_ref<kernels::ref::LayerNorm>("layer_norm", layer_norm_params);
  lower_last_axis_ref<kernels::ref::LayerNormBwd>("layer_norm_bwd", layer_norm_params);
}

}  // namespace memfit
