#include "kernels/ref/linear.hpp"
#include "runtime/lower/lower_util.hpp"

namespace memfit {

void register_matmul_kernels() {
  // a[..., M, K] x b[..., K, N] (trans flags swap an operand's last two axes);
  // the leading axes fold into B, and an operand without them is broadcast.
  register_kernel("matmul", [](const Graph& g, const Node& n, Backend b) {
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
    return make_ref<kernels::ref::Matmul>(b, p);
  });
}

}  // namespace memfit
