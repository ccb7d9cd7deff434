// Reference lowering of the row-wise cross-entropy (ops/xent_rows/ref.hpp).
#include "ops/xent_rows/params_of.hpp"
#include "ops/xent_rows/ref.hpp"
#include "runtime/lower/lower_util.hpp"

namespace memfit {

void register_xent_rows_ref_kernels() {
  register_kernel("xent_rows", [](const LoweredGraph& lg, NodeId id) {
    return make_ref<kernels::ref::XentRows>(lg, xent_rows_params(lg.graph(), lg.node(id)));
  });
  register_kernel("xent_rows_bwd", [](const LoweredGraph& lg, NodeId id) {
    return make_ref<kernels::ref::XentRowsBwd>(lg, xent_rows_params(lg.graph(), lg.node(id)));
  });
}

}  // namespace memfit
