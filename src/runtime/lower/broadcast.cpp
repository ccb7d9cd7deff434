// Reference lowering of add_broadcast and sum_leading (kernels/ref/broadcast.hpp).
#include "kernels/ref/broadcast.hpp"
#include "runtime/lower/lower_util.hpp"
#include "runtime/lower/params_of_broadcast.hpp"

namespace memfit {

void register_broadcast_kernels() {
  register_kernel("add_broadcast", [](const LoweredGraph& lg, NodeId id) {
    return make_ref<kernels::ref::AddBroadcast>(lg.backend(), broadcast_params(lg.graph(), lg.node(id)));
  });
  register_kernel("sum_leading", [](const LoweredGraph& lg, NodeId id) {
    return make_ref<kernels::ref::SumLeading>(lg.backend(), broadcast_params(lg.graph(), lg.node(id)));
  });
}

}  // namespace memfit
