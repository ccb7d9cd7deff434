// Reference lowering of softmax and softmax_bwd.
#include "ops/common/lower_last_axis.hpp"
#include "ops/common/params_of_last_axis.hpp"
#include "ops/softmax/ref.hpp"

namespace memfit {

void register_softmax_ref_kernels() {
  lower_last_axis_ref<kernels::ref::Softmax>("softmax", softmax_params);
  lower_last_axis_ref<kernels::ref::SoftmaxBwd>("softmax_bwd", softmax_params);
}

}  // namespace memfit
