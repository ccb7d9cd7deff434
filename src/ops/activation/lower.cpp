// Reference lowering of activation and activation_bwd.
#include "ops/activation/params_of.hpp"
#include "ops/activation/ref.hpp"
#include "runtime/lower/lower_util.hpp"

namespace memfit {

void register_activation_ref_kernels() {
  register_kernel("activation", [](const LoweredGraph& lg, NodeId id) {
    return make_ref<kernels::ref::Activation>(lg, activation_params(lg.graph(), lg.node(id)));
  });
  register_kernel("activation_bwd", [](const LoweredGraph& lg, NodeId id) {
    return make_ref<kernels::ref::ActivationBwd>(lg, activation_params(lg.graph(), lg.node(id)));
  });
}

}  // namespace memfit
