// Reference lowering of the evaluation metrics (kernels/ref/metrics.hpp).
#include "kernels/ref/metrics.hpp"
#include "runtime/lower/lower_util.hpp"
#include "runtime/lower/params_of_metrics.hpp"

namespace memfit {

void register_metrics_kernels() {
  register_kernel("xent_metrics", [](const Graph& g, const Node& n, Backend b) {
    return make_ref<kernels::ref::XentMetrics>(b, metrics_params(g, n));
  });
}

}  // namespace memfit
