// Reference lowering of attention and attention_bwd (kernels/ref/attention.hpp).
#include "kernels/ref/attention.hpp"
#include "runtime/lower/lower_util.hpp"
#include "runtime/lower/params_of_attention.hpp"

namespace memfit {

void register_attention_kernels() {
  register_kernel("attention", [](const LoweredGraph& lg, NodeId id) {
    return make_ref<kernels::ref::Attention>(lg.backend(), attention_params(lg.graph(), lg.node(id)));
  });
  register_kernel("attention_bwd", [](const LoweredGraph& lg, NodeId id) {
    return make_ref<kernels::ref::AttentionBwd>(lg.backend(), attention_params(lg.graph(), lg.node(id)));
  });
}

}  // namespace memfit
