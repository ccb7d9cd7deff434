#include "ops/linear/cpu.hpp"
#include "runtime/device.hpp"
#include "ops/linear/params_of.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"

namespace memfit {
namespace {

// linear and linear_bwd_data alike: node input 0 (x or dy) against the
// weight (input 1), through `make(node, input 0's shape, the weight's shape,
// the product type, bf16 weight)`. A bf16 weight (bf16 master weights) is
// read as it is by the bf16 kernels; elsewhere (f32 activations, or f32
// products on this CPU) the node runs between conversions (nullptr here).
template <class Make>
std::unique_ptr<kernels::Kernel> with_weight(const LoweredGraph& lg, NodeId id, Make make) {
  const Graph& g = lg.graph();
  const Node& n = lg.node(id);
  const auto act = cpu_act(g, n, true);
  if (!act) return nullptr;
  const kernels::ElemType t = product_type(lg, *act);
  const bool w16 = bf16_weight(g, n.inputs[1]);
  if (w16 && t != kernels::ElemType::BF16) return nullptr;
  return converted(g, n, t, make(n, shape_of(g, n.inputs[0]), shape_of(g, n.inputs[1]), t, w16));
}

}  // namespace

void register_linear_cpu_kernels() {
  using KPtr = std::unique_ptr<kernels::Kernel>;
  // x[..., K] is viewed as [M, K].
  register_cpu_kernel("linear", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    return with_weight(lg, id, [](const Node& n, const Shape& x, const Shape& w, kernels::ElemType t, bool w16) {
      return kernels::cpu::make_linear({numel(x) / x.back(), x.back(), w[0], n.inputs.size() == 3}, t, w16);
    });
  });
  register_cpu_kernel("linear_bwd_data", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    return with_weight(lg, id, [](const Node&, const Shape& dy, const Shape& w, kernels::ElemType t, bool w16) {
      return kernels::cpu::make_linear_bwd_data({numel(dy) / dy.back(), w[1], w[0], false}, t, w16);
    });
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
    const kernels::MatmulParams p = matmul_params(g, n);
    // An f32 product reading a bf16 weight (bf16 master weights under fp32
    // activations): panel by panel, never the whole weight widened.
    if (g.value(n.inputs[0]).dtype == DType::f32 && g.value(n.inputs[1]).dtype == DType::bf16 &&
        g.value(n.outputs[0]).dtype == DType::f32 && !lg.device().wide_floats())
      return kernels::cpu::make_matmul_bf16_b(p);
    if (!all_f32(g, n)) return nullptr;
    return kernels::cpu::make_matmul(p);
  });
}

}  // namespace memfit
