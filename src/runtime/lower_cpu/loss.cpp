#include "kernels/cpu/loss.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"

namespace memfit {
namespace {

// logits (forward input 0) and probs (backward input 0) are both [N, C].
kernels::XentParams xent_params(const Graph& g, const Node& n) {
  const Shape& z = shape_of(g, n.inputs[0]);
  return {z[0], z[1], n.attrs.f("smoothing", 0.0)};
}

}  // namespace

void register_cpu_loss_kernels() {
  using KPtr = std::unique_ptr<kernels::Kernel>;
  register_cpu_kernel("softmax_xent", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    if (!all_f32(g, n)) return nullptr;
    return kernels::cpu::make_softmax_xent(xent_params(g, n));
  });
  register_cpu_kernel("softmax_xent_bwd", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    if (!all_f32(g, n)) return nullptr;
    return kernels::cpu::make_softmax_xent_bwd(xent_params(g, n));
  });
}

}  // namespace memfit
