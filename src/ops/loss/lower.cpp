#include "ops/loss/params_of.hpp"
#include "ops/loss/ref.hpp"
#include "runtime/lower/lower_util.hpp"

namespace memfit {

void register_loss_ref_kernels() {
  register_kernel("softmax_xent", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    return make_ref<kernels::ref::SoftmaxXent>(lg, xent_params(g, n));
  });
  register_kernel("softmax_xent_bwd", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    return make_ref<kernels::ref::SoftmaxXentBwd>(lg, xent_params(g, n));
  });
}

}  // namespace memfit
