#include "ops/pool/cpu.hpp"
#include "ops/pool/params_of.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"
#include "runtime/lower_cpu/layout.hpp"

namespace memfit {
namespace {

// The index output of a Cpu max_pool2d holds oneDNN's workspace, which only
// the Cpu max_pool2d_bwd can read. Both factories therefore take the same
// decision from the same facts: the forward node and every reader of its
// index output compute in f32, and (inside kernels/cpu) oneDNN handles the
// shapes, which the two nodes share.
// Returns the activation type both use, or nullopt.
std::optional<kernels::ElemType> max_pool_on_cpu(const Graph& g, const Node& fwd) {
  const auto act = cpu_act(g, fwd);
  if (!act) return std::nullopt;
  const ValueId idx = fwd.outputs[1];
  for (const Node& m : g.nodes())
    for (ValueId v : m.inputs)
      if (v == idx && cpu_act(g, m) != act) return std::nullopt;
  return act;
}

}  // namespace

void register_pool_cpu_kernels() {
  using KPtr = std::unique_ptr<kernels::Kernel>;
  register_cpu_kernel("max_pool2d", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const auto act = max_pool_on_cpu(g, n);
    if (!act) return nullptr;
    return kernels::cpu::make_max_pool2d(pool_params(n, shape_of(g, n.inputs[0]), shape_of(g, n.outputs[0])), *act);
  });
  // in: dy, idx (output 1 of the forward node)
  register_cpu_kernel("max_pool2d_bwd", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const NodeId fwd = g.value(n.inputs[1]).producer;
    const auto act = fwd < 0 ? std::nullopt : max_pool_on_cpu(g, g.node(fwd));
    if (!act) return nullptr;
    return kernels::cpu::make_max_pool2d_bwd(pool_params(n, n.attrs.ints("x_shape"), shape_of(g, n.inputs[0])), *act);
  });
  register_cpu_kernel("avg_pool2d", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const auto act = cpu_act(g, n);
    if (!act) return nullptr;
    return kernels::cpu::make_avg_pool2d(pool_params(n, shape_of(g, n.inputs[0]), shape_of(g, n.outputs[0])), *act);
  });
  register_cpu_kernel("avg_pool2d_bwd", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const auto act = cpu_act(g, n);
    if (!act) return nullptr;
    return kernels::cpu::make_avg_pool2d_bwd(pool_params(n, n.attrs.ints("x_shape"), shape_of(g, n.inputs[0])), *act);
  });
  register_cpu_layouts("global_avg_pool", {{0}, {}, false});
  register_cpu_layouts("global_avg_pool_bwd", {{}, {0}, false});
  register_cpu_kernel("global_avg_pool", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const auto act = cpu_act(g, n);
    if (!act) return nullptr;
    const Shape& x = shape_of(g, n.inputs[0]);
    const auto l = cpu_layout(lg, n.inputs[0]);
    return blocked_checked(kernels::cpu::make_global_avg_pool({x[0], x[1], x[2] * x[3]}, l, *act),
                           l != kernels::cpu::Layout::Plain, g, n);
  });
  register_cpu_kernel("global_avg_pool_bwd", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const auto act = cpu_act(g, n);
    if (!act) return nullptr;
    const Shape& x = n.attrs.ints("x_shape");
    const auto l = cpu_layout(lg, n.outputs[0]);
    return blocked_checked(kernels::cpu::make_global_avg_pool_bwd({x[0], x[1], x[2] * x[3]}, l, *act),
                           l != kernels::cpu::Layout::Plain, g, n);
  });
}

}  // namespace memfit
