#include "kernels/cpu/pool.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"
#include "runtime/lower_cpu/layout.hpp"
#include "runtime/lower/params_of.hpp"

namespace memfit {
namespace {

// The index output of a Cpu max_pool2d holds oneDNN's workspace, which only
// the Cpu max_pool2d_bwd can read. Both factories therefore take the same
// decision from the same facts: the forward node and every reader of its
// index output compute in f32, and (inside kernels/cpu) oneDNN handles the
// shapes, which the two nodes share.
bool max_pool_on_cpu(const Graph& g, const Node& fwd) {
  if (!all_f32(g, fwd)) return false;
  const ValueId idx = fwd.outputs[1];
  for (const Node& m : g.nodes())
    for (ValueId v : m.inputs)
      if (v == idx && !all_f32(g, m)) return false;
  return true;
}

}  // namespace

void register_cpu_pool_kernels() {
  using KPtr = std::unique_ptr<kernels::Kernel>;
  register_cpu_kernel("max_pool2d", [](const Graph& g, const Node& n, Backend) -> KPtr {
    if (!max_pool_on_cpu(g, n)) return nullptr;
    return kernels::cpu::make_max_pool2d(pool_params(n, shape_of(g, n.inputs[0]), shape_of(g, n.outputs[0])));
  });
  // in: dy, idx (output 1 of the forward node)
  register_cpu_kernel("max_pool2d_bwd", [](const Graph& g, const Node& n, Backend) -> KPtr {
    const NodeId fwd = g.value(n.inputs[1]).producer;
    if (fwd < 0 || !max_pool_on_cpu(g, g.node(fwd))) return nullptr;
    return kernels::cpu::make_max_pool2d_bwd(pool_params(n, n.attrs.ints("x_shape"), shape_of(g, n.inputs[0])));
  });
  register_cpu_kernel("avg_pool2d", [](const Graph& g, const Node& n, Backend) -> KPtr {
    if (!all_f32(g, n)) return nullptr;
    return kernels::cpu::make_avg_pool2d(pool_params(n, shape_of(g, n.inputs[0]), shape_of(g, n.outputs[0])));
  });
  register_cpu_kernel("avg_pool2d_bwd", [](const Graph& g, const Node& n, Backend) -> KPtr {
    if (!all_f32(g, n)) return nullptr;
    return kernels::cpu::make_avg_pool2d_bwd(pool_params(n, n.attrs.ints("x_shape"), shape_of(g, n.inputs[0])));
  });
  register_cpu_kernel("global_avg_pool", [](const Graph& g, const Node& n, Backend) -> KPtr {
    if (!all_f32(g, n)) return nullptr;
    const Shape& x = shape_of(g, n.inputs[0]);
    const auto l = cpu_layouts(g)[static_cast<size_t>(n.inputs[0])];
    return blocked_checked(kernels::cpu::make_global_avg_pool({x[0], x[1], x[2] * x[3]}, l),
                           l != kernels::cpu::Layout::Plain, g, n);
  });
  register_cpu_kernel("global_avg_pool_bwd", [](const Graph& g, const Node& n, Backend) -> KPtr {
    if (!all_f32(g, n)) return nullptr;
    const Shape& x = n.attrs.ints("x_shape");
    const auto l = cpu_layouts(g)[static_cast<size_t>(n.outputs[0])];
    return blocked_checked(kernels::cpu::make_global_avg_pool_bwd({x[0], x[1], x[2] * x[3]}, l),
                           l != kernels::cpu::Layout::Plain, g, n);
  });
}

}  // namespace memfit
