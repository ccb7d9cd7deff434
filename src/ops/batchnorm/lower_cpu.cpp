#include "ops/batchnorm/cpu.hpp"
#include "ops/batchnorm/params_of.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"
#include "runtime/lower_cpu/layout.hpp"

namespace memfit {
namespace {

// Training needs more than one value per channel: the reference lowering
// reports that case, so it is left to it.
bool handled(const kernels::BatchNormParams& p) { return !p.training || p.N * p.HW >= 2; }
bool takes(const Graph& g, const Node& n) { return handled(bn_params(g, n)); }

}  // namespace

void register_batchnorm_cpu_kernels() {
  using KPtr = std::unique_ptr<kernels::Kernel>;
  register_cpu_kernel("batch_norm", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    auto p = bn_params(g, n);
    const auto act = cpu_act(g, n);
    if (!act || !handled(p)) return nullptr;
    const auto l = lg.layout(n.inputs[0]);
    return blocked_checked(kernels::cpu::make_batch_norm(p, l, *act), l != kernels::cpu::Layout::Plain, g, n);
  }, takes);
  register_cpu_kernel("batch_norm_bwd", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    auto p = bn_params(g, n);
    const auto act = cpu_act(g, n);
    if (!act || !handled(p)) return nullptr;
    const auto l = lg.layout(n.inputs[0]);
    return blocked_checked(kernels::cpu::make_batch_norm_bwd(p, l, *act), l != kernels::cpu::Layout::Plain, g, n);
  }, takes);
}

}  // namespace memfit
