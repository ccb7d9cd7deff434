#include "ops/loss/params_of.hpp"
#include "ops/loss/ref.hpp"
#include "runtime/lower/lower_util.hpp"

namespace memfit {

void register_loss_ref_kernels() {
  register_kernel("softmax_xent", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Backend b = lg.backend();
    return make_ref<kernels::ref::SoftmaxXent>(b, xent_params(g, n));
  });
  register_kernel("softmax_xent_bwd", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Backend b = lg.backend();
    return make_ref<kernels::ref::SoftmaxXentBwd>(b, xent_params(g, n));
  });
}

}  // namespace memfit
