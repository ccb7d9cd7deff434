// Reference lowering of the evaluation metrics (kernels/ref/metrics.hpp).
#include "kernels/ref/metrics.hpp"
#include "runtime/lower/lower_util.hpp"
#include "runtime/lower/params_of_metrics.hpp"

namespace memfit {

void register_metrics_kernels() {
  register_kernel("xent_metrics", [](const LoweredGraph& lg, NodeId id) {
    return make_ref<kernels::ref::XentMetrics>(lg.backend(), metrics_params(lg.graph(), lg.node(id)));
  });
}

}  // namespace memfit
