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

// batch_norm and batch_norm_bwd alike: the kernel `make` gives for the
// input's layout, where the activation type is the CPU's and training has
// the values it needs.
template <class Make>
std::unique_ptr<kernels::Kernel> bn_kernel(const LoweredGraph& lg, NodeId id, Make make) {
  const Graph& g = lg.graph();
  const Node& n = lg.node(id);
  auto p = bn_params(g, n);
  const auto act = cpu_act(g, n);
  if (!act || !handled(p)) return nullptr;
  const auto l = cpu_layout(lg, n.inputs[0]);
  return blocked_checked(make(p, l, *act), l != kernels::cpu::Layout::Plain, g, n);
}

}  // namespace

void register_batchnorm_cpu_kernels() {
  // x and y (and dy, dx) in one layout.
  register_cpu_layouts("batch_norm", {{0}, {0}, true});
  register_cpu_layouts("batch_norm_bwd", {{0, 1}, {0}, true});
  register_cpu_kernel("batch_norm", [](const LoweredGraph& lg, NodeId id) {
    return bn_kernel(lg, id, [](const auto& p, auto l, auto act) { return kernels::cpu::make_batch_norm(p, l, act); });
  }, takes);
  register_cpu_kernel("batch_norm_bwd", [](const LoweredGraph& lg, NodeId id) {
    return bn_kernel(lg, id, [](const auto& p, auto l, auto act) { return kernels::cpu::make_batch_norm_bwd(p, l, act); });
  }, takes);
}

}  // namespace memfit
