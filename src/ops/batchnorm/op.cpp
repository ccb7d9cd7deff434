// batch_norm over NCHW (or [N, C]) input; statistics per channel C over N and
// the spatial axes. Inputs: x, gamma, beta, running_mean, running_var.
// Outputs: y, mean[C], var[C] (the statistics the backward reads).
#include "ops/common/op_common.hpp"

namespace memfit {

void register_batchnorm_ops() {
  OpDef bn;
  bn.name = "batch_norm";
  // A recomputed batch norm must not update the running statistics again.
  bn.traits.recompute_disables = "update_stats";
  bn.infer = [](const Graph& g, const Node& n) {
    if (n.inputs.size() != 5) shape_fail(g, n, "batch_norm takes x, gamma, beta, running_mean, running_var");
    const Shape& x = in_shape(g, n, 0);
    if (x.size() != 2 && x.size() != 4) shape_fail(g, n, "batch_norm needs [N, C] or [N, C, H, W] input");
    for (size_t i = 1; i < 5; ++i)
      if (in_shape(g, n, i) != Shape{x[1]})
        shape_fail(g, n, "per-channel tensors must be [" + std::to_string(x[1]) + "]");
    DType dt = in_dtype(g, n, 0);
    return std::vector<ValueMeta>{{x, dt}, {Shape{x[1]}, DType::f32}, {Shape{x[1]}, DType::f32}};
  };
  bn.grad = [](GradContext& c) {
    std::vector<ValueId> r(5, kNone);
    if (c.out_grads[0] == kNone || !(c.need[0] || c.need[1] || c.need[2])) return r;
    Attrs a = c.fwd().attrs;
    auto outs = c.emit("batch_norm_bwd", {c.in(0), c.out_grads[0], c.in(1), c.out(1), c.out(2)}, a);
    r[0] = c.need[0] ? outs[0] : kNone;
    r[1] = c.need[1] ? outs[1] : kNone;
    r[2] = c.need[2] ? outs[2] : kNone;
    return r;
  };
  bn.flops = [](const Graph& g, const Node& n) { return 8.0 * static_cast<double>(numel(in_shape(g, n, 0))); };
  register_op(bn);

  OpDef bwd;
  bwd.name = "batch_norm_bwd";
  bwd.traits.no_gradient = true;
  bwd.infer = [](const Graph& g, const Node& n) {
    const Shape& x = in_shape(g, n, 0);
    DType dt = in_dtype(g, n, 0);
    return std::vector<ValueMeta>{{x, dt}, {Shape{x[1]}, DType::f32}, {Shape{x[1]}, DType::f32}};
  };
  register_op(bwd);
}

}  // namespace memfit
