// Reference lowering of the row-wise cross-entropy (kernels/ref/xent_rows.hpp).
#include "kernels/ref/xent_rows.hpp"
#include "runtime/lower/lower_util.hpp"
#include "runtime/lower/params_of_xent_rows.hpp"

namespace memfit {

void register_xent_rows_kernels() {
  register_kernel("xent_rows", [](const LoweredGraph& lg, NodeId id) {
    return make_ref<kernels::ref::XentRows>(lg.backend(), xent_rows_params(lg.graph(), lg.node(id)));
  });
  register_kernel("xent_rows_bwd", [](const LoweredGraph& lg, NodeId id) {
    return make_ref<kernels::ref::XentRowsBwd>(lg.backend(), xent_rows_params(lg.graph(), lg.node(id)));
  });
}

}  // namespace memfit
