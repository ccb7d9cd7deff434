#include "ops/dropout/params_of.hpp"
#include "ops/dropout/ref.hpp"
#include "runtime/lower/lower_util.hpp"

namespace memfit {
void register_dropout_ref_kernels() {
  register_kernel("dropout", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    return make_ref<kernels::ref::Dropout>(lg, dropout_params(g, n));
  });
  register_kernel("dropout_bwd", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    return make_ref<kernels::ref::DropoutBwd>(lg, dropout_params(g, n));
  });
}

}  // namespace memfit
