#include "kernels/ref/loss.hpp"
#include "runtime/lower/lower_util.hpp"

namespace memfit {
namespace {

// logits (forward input 0) and probs (backward input 0) are both [N, C].
kernels::XentParams xent_params(const Graph& g, const Node& n) {
  const Shape& z = shape_of(g, n.inputs[0]);
  return {z[0], z[1], n.attrs.f("smoothing", 0.0)};
}

}  // namespace

void register_loss_kernels() {
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
