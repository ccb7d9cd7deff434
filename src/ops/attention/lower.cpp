// Reference lowering of attention and attention_bwd (ops/attention/ref.hpp).
#include "ops/attention/params_of.hpp"
#include "ops/attention/ref.hpp"
#include "runtime/lower/lower_util.hpp"

namespace memfit {

void register_attention_ref_kernels() {
  register_kernel("attention", [](const LoweredGraph& lg, NodeId id) {
    return make_ref<kernels::ref::Attention>(lg, attention_params(lg.graph(), lg.node(id)));
  });
  register_kernel("attention_bwd", [](const LoweredGraph& lg, NodeId id) {
    return make_ref<kernels::ref::AttentionBwd>(lg, attention_params(lg.graph(), lg.node(id)));
  });
}

}  // namespace memfit
