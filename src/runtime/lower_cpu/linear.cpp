#include "kernels/cpu/linear.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"

namespace memfit {

void register_cpu_linear_kernels() {
  using KPtr = std::unique_ptr<kernels::Kernel>;
  // x[..., K] is viewed as [M, K].
  register_cpu_kernel("linear", [](const Graph& g, const Node& n, Backend) -> KPtr {
    if (!all_f32(g, n)) return nullptr;
    const Shape& x = shape_of(g, n.inputs[0]);
    const Shape& w = shape_of(g, n.inputs[1]);
    return kernels::cpu::make_linear({numel(x) / x.back(), x.back(), w[0], n.inputs.size() == 3});
  });
  register_cpu_kernel("linear_bwd_data", [](const Graph& g, const Node& n, Backend) -> KPtr {
    if (!all_f32(g, n)) return nullptr;
    const Shape& dy = shape_of(g, n.inputs[0]);
    const Shape& w = shape_of(g, n.inputs[1]);
    return kernels::cpu::make_linear_bwd_data({numel(dy) / dy.back(), w[1], w[0], false});
  });
  register_cpu_kernel("linear_bwd_weight", [](const Graph& g, const Node& n, Backend) -> KPtr {
    if (!all_f32(g, n)) return nullptr;
    const Shape& x = shape_of(g, n.inputs[0]);
    const Shape& dy = shape_of(g, n.inputs[1]);
    return kernels::cpu::make_linear_bwd_weight({numel(x) / x.back(), x.back(), dy.back(), n.attrs.i("bias", 0) != 0});
  });
  // a[..., M, K] x b[..., K, N] (trans flags swap an operand's last two axes);
  // the leading axes fold into B, and an operand without them is broadcast.
  register_cpu_kernel("matmul", [](const Graph& g, const Node& n, Backend) -> KPtr {
    if (!all_f32(g, n)) return nullptr;
    const Shape& as = shape_of(g, n.inputs[0]);
    const Shape& bs = shape_of(g, n.inputs[1]);
    const Shape& cs = shape_of(g, n.outputs[0]);
    kernels::MatmulParams p;
    p.trans_a = n.attrs.i("trans_a", 0) != 0;
    p.trans_b = n.attrs.i("trans_b", 0) != 0;
    p.M = cs[cs.size() - 2];
    p.N = cs.back();
    p.K = p.trans_a ? as[as.size() - 2] : as.back();
    p.B = numel(cs) / (p.M * p.N);
    p.a_batch = as.size() == 2 ? 1 : p.B;
    p.b_batch = bs.size() == 2 ? 1 : p.B;
    return kernels::cpu::make_matmul(p);
  });
}

}  // namespace memfit
