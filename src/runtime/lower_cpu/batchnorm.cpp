#include "kernels/cpu/batchnorm.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"
#include "runtime/lower_cpu/layout.hpp"

namespace memfit {
namespace {

// x is [N, C] or [N, C, H, W]; the spatial axes fold into HW.
kernels::BatchNormParams bn_params(const Graph& g, const Node& n) {
  const Shape& x = shape_of(g, n.inputs[0]);
  kernels::BatchNormParams p{x[0], x[1], numel(x) / (x[0] * x[1])};
  p.eps = n.attrs.f("eps", 1e-5);
  p.momentum = n.attrs.f("momentum", 0.1);
  p.training = n.attrs.i("training", 1) != 0;
  p.update_stats = n.attrs.i("update_stats", 1) != 0;
  return p;
}

// Training needs more than one value per channel: the reference lowering
// reports that case, so it is left to it.
bool handled(const kernels::BatchNormParams& p) { return !p.training || p.N * p.HW >= 2; }

}  // namespace

void register_cpu_batchnorm_kernels() {
  using KPtr = std::unique_ptr<kernels::Kernel>;
  register_cpu_kernel("batch_norm", [](const Graph& g, const Node& n, Backend) -> KPtr {
    auto p = bn_params(g, n);
    if (!all_f32(g, n) || !handled(p)) return nullptr;
    const auto l = cpu_layouts(g)[static_cast<size_t>(n.inputs[0])];
    return blocked_checked(kernels::cpu::make_batch_norm(p, l), l != kernels::cpu::Layout::Plain, g, n);
  });
  register_cpu_kernel("batch_norm_bwd", [](const Graph& g, const Node& n, Backend) -> KPtr {
    auto p = bn_params(g, n);
    if (!all_f32(g, n) || !handled(p)) return nullptr;
    const auto l = cpu_layouts(g)[static_cast<size_t>(n.inputs[0])];
    return blocked_checked(kernels::cpu::make_batch_norm_bwd(p, l), l != kernels::cpu::Layout::Plain, g, n);
  });
}

}  // namespace memfit
