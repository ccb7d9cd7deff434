#include "ops/linear/cpu.hpp"
#include "ops/linear/params_of.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"

namespace memfit {

void register_linear_cpu_kernels() {
  using KPtr = std::unique_ptr<kernels::Kernel>;
  // x[..., K] is viewed as [M, K].
  // A bf16 weight (bf16 master weights) is read as it is by the bf16
  // kernels; elsewhere (f32 activations, or f32 products on this CPU) the
  // node runs between conversions (nullptr here).
  register_cpu_kernel("linear", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const auto act = cpu_act(g, n, true);
    if (!act) return nullptr;
    const bool w16 = bf16_weight(g, n.inputs[1]);
    if (w16 && product_type(lg, *act) != kernels::ElemType::BF16) return nullptr;
    const Shape& x = shape_of(g, n.inputs[0]);
    const Shape& w = shape_of(g, n.inputs[1]);
    return converted(g, n, product_type(lg, *act), kernels::cpu::make_linear({numel(x) / x.back(), x.back(), w[0], n.inputs.size() == 3},
                                                     product_type(lg, *act), w16));
  });
  register_cpu_kernel("linear_bwd_data", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const auto act = cpu_act(g, n, true);
    if (!act) return nullptr;
    const bool w16 = bf16_weight(g, n.inputs[1]);
    if (w16 && product_type(lg, *act) != kernels::ElemType::BF16) return nullptr;
    const Shape& dy = shape_of(g, n.inputs[0]);
    const Shape& w = shape_of(g, n.inputs[1]);
    return converted(g, n, product_type(lg, *act), kernels::cpu::make_linear_bwd_data({numel(dy) / dy.back(), w[1], w[0], false}, product_type(lg, *act), w16));
  });
  register_cpu_kernel("linear_bwd_weight", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const auto act = cpu_act(g, n);
    if (!act) return nullptr;
    const Shape& x = shape_of(g, n.inputs[0]);
    const Shape& dy = shape_of(g, n.inputs[1]);
    return converted(g, n, product_type(lg, *act), kernels::cpu::make_linear_bwd_weight(
                               {numel(x) / x.back(), x.back(), dy.back(), n.attrs.i("bias", 0) != 0}, product_type(lg, *act)));
  });
  register_cpu_kernel("matmul", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    if (!all_f32(g, n)) return nullptr;
    const kernels::MatmulParams p = matmul_params(g, n);
    return kernels::cpu::make_matmul(p);
  });
}

}  // namespace memfit
