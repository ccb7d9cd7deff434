// Reference lowering of the evaluation metrics (ops/metrics/ref.hpp).
#include "ops/metrics/params_of.hpp"
#include "ops/metrics/ref.hpp"
#include "runtime/lower/lower_util.hpp"

namespace memfit {

void register_metrics_ref_kernels() {
  register_kernel("xent_metrics", [](const LoweredGraph& lg, NodeId id) {
    return make_ref<kernels::ref::XentMetrics>(lg, metrics_params(lg.graph(), lg.node(id)));
  });
}

}  // namespace memfit
