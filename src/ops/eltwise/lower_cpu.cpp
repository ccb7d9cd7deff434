#include "ops/eltwise/cpu.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"

namespace memfit {

void register_eltwise_cpu_kernels() {
  using KPtr = std::unique_ptr<kernels::Kernel>;
  // Element-wise: any layout, the same for every operand. cast's one
  // lowering (runtime/mixed.cpp) serves every device.
  register_cpu_layouts("relu", {{0}, {0}, true});
  register_cpu_layouts("relu_bwd", {{0, 1}, {0}, true});
  register_cpu_layouts("add", {{0, 1}, {0}, true});
  register_cpu_layouts("scale", {{0}, {0}, true});
  register_cpu_layouts("cast", {{0}, {0}, true});
  auto n_of = [](const Graph& g, const Node& n) { return numel(g.value(n.outputs[0]).shape); };
  register_cpu_kernel("relu", [=](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const auto act = cpu_act(g, n);
    if (!act) return nullptr;
    return kernels::cpu::make_relu({n_of(g, n)}, *act);
  });
  register_cpu_kernel("relu_bwd", [=](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const auto act = cpu_act(g, n);
    if (!act) return nullptr;
    return kernels::cpu::make_relu_bwd({n_of(g, n)}, *act);
  });
  register_cpu_kernel("add", [=](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const auto act = cpu_act(g, n);
    if (!act) return nullptr;
    return kernels::cpu::make_add({n_of(g, n)}, *act);
  });
  register_cpu_kernel("scale", [=](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const auto act = cpu_act(g, n);
    if (!act) return nullptr;
    return kernels::cpu::make_scale({n_of(g, n), n.attrs.f("alpha")}, *act);
  });
  register_cpu_kernel("fill", [=](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    if (!all_f32(g, n)) return nullptr;
    return kernels::cpu::make_fill({n_of(g, n), n.attrs.f("value")});
  });
}

}  // namespace memfit
