// softmax_xent: softmax + cross-entropy with mean reduction and optional label
// smoothing. Inputs logits[N, C], labels[N] (i32). Outputs loss[1], probs[N, C]
// (the softmax, which the backward reads).
#include "ops/common/op_common.hpp"

namespace memfit {

void register_loss_ops() {
  OpDef x;
  x.name = "softmax_xent";
  x.infer = [](const Graph& g, const Node& n) {
    const Shape& l = in_shape(g, n, 0);
    if (l.size() != 2) {
      // The model's output is not [batch, classes]: say which layer made it.
      std::string what = "the model's output must be [batch, classes] logits, got " + shape_str(l);
      const NodeId p = g.value(n.inputs[0]).producer;
      if (p != kNone) {
        const Node& last = g.node(p);
        what += "; it comes from layer '" + last.layer + "' (" + last.op + ")";
        if (last.op == "linear" && l.size() > 2)
          what += ", and linear acts on the last axis only: add `flatten` (or `gap`) before that linear layer";
      }
      shape_fail(g, n, what);
    }
    if (in_shape(g, n, 1) != Shape{l[0]} || in_dtype(g, n, 1) != DType::i32)
      shape_fail(g, n, "labels must be i32 [" + std::to_string(l[0]) + "]");
    return std::vector<ValueMeta>{{Shape{1}, DType::f32}, {l, DType::f32}};
  };
  x.grad = [](GradContext& c) {
    std::vector<ValueId> r{kNone, kNone};
    if (c.out_grads[0] != kNone && c.need[0])
      r[0] = c.emit1("softmax_xent_bwd", {c.out(1), c.in(1), c.out_grads[0]}, c.fwd().attrs);
    return r;
  };
  register_op(x);

  OpDef b;
  b.name = "softmax_xent_bwd";
  b.traits.inplace_input = 0;  // dlogits may overwrite probs
  b.traits.no_gradient = true;
  b.infer = [](const Graph& g, const Node& n) { return same_as(g, n, 0); };
  register_op(b);
}

}  // namespace memfit
