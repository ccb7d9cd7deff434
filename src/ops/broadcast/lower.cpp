// Reference lowering of add_broadcast, expand_leading and sum_leading (ops/broadcast/ref.hpp).
#include "ops/broadcast/params_of.hpp"
#include "ops/broadcast/ref.hpp"
#include "runtime/lower/lower_util.hpp"

namespace memfit {

void register_broadcast_ref_kernels() {
  register_kernel("add_broadcast", [](const LoweredGraph& lg, NodeId id) {
    return make_ref<kernels::ref::AddBroadcast>(lg, broadcast_params(lg.graph(), lg.node(id)));
  });
  register_kernel("expand_leading", [](const LoweredGraph& lg, NodeId id) {
    return make_ref<kernels::ref::ExpandLeading>(lg, broadcast_params(lg.graph(), lg.node(id)));
  });
  register_kernel("sum_leading", [](const LoweredGraph& lg, NodeId id) {
    return make_ref<kernels::ref::SumLeading>(lg, broadcast_params(lg.graph(), lg.node(id)));
  });
}

}  // namespace memfit
