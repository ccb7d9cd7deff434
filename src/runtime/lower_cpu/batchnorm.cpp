#include "kernels/cpu/batchnorm.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"
#include "runtime/lower_cpu/layout.hpp"
#include "runtime/lower/params_of.hpp"

namespace memfit {
namespace {

// Training needs more than one value per channel: the reference lowering
// reports that case, so it is left to it.
bool handled(const kernels::BatchNormParams& p) { return !p.training || p.N * p.HW >= 2; }

}  // namespace

void register_cpu_batchnorm_kernels() {
  using KPtr = std::unique_ptr<kernels::Kernel>;
  register_cpu_kernel("batch_norm", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    auto p = bn_params(g, n);
    const auto act = cpu_act(g, n);
    if (!act || !handled(p)) return nullptr;
    const auto l = lg.layout(n.inputs[0]);
    return blocked_checked(kernels::cpu::make_batch_norm(p, l, *act), l != kernels::cpu::Layout::Plain, g, n);
  });
  register_cpu_kernel("batch_norm_bwd", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    auto p = bn_params(g, n);
    const auto act = cpu_act(g, n);
    if (!act || !handled(p)) return nullptr;
    const auto l = lg.layout(n.inputs[0]);
    return blocked_checked(kernels::cpu::make_batch_norm_bwd(p, l, *act), l != kernels::cpu::Layout::Plain, g, n);
  });
}

}  // namespace memfit
