// Reference lowering of binary and binary_bwd.
#include "ops/binary/params_of.hpp"
#include "ops/binary/ref.hpp"
#include "runtime/lower/lower_util.hpp"

namespace memfit {

void register_binary_ref_kernels() {
  register_kernel("binary", [](const LoweredGraph& lg, NodeId id) {
    return make_ref<kernels::ref::Binary>(lg, binary_params(lg.graph(), lg.node(id)));
  });
  register_kernel("binary_bwd", [](const LoweredGraph& lg, NodeId id) {
    return make_ref<kernels::ref::BinaryBwd>(lg, binary_params(lg.graph(), lg.node(id)));
  });
}

}  // namespace memfit
