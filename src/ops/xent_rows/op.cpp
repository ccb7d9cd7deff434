// xent_rows: mean cross-entropy over rows of a classifier's logits, made for
// large vocabularies (issue #12). R rows (every axis of the logits but the
// last), V classes (the last axis).
//
// Inputs logits[..., V] (f32), targets[...] (i32, the logits' shape without
// the class axis). Outputs loss[1] (f32) and lse[...] (f32, log sum_c
// exp(z_c) per row: all the backward needs besides the logits, 4 bytes a
// row instead of softmax_xent's probabilities, 4 V bytes a row).
//   A negative target is padding (PyTorch's ignore_index): its row is not
//   counted and gets no gradient. loss = the mean over the counted rows of
//   -sum_c q_c log softmax(z)_c, q = (1-s) onehot(target) + s/V (s: the
//   "smoothing" attribute, as softmax_xent); 0 when every row is padding.
//   A target >= V is a mistake: the loss and that row's gradient are NaN.
//
// xent_rows_bwd(logits, lse, targets, dloss) -> dlogits [..., V], assigned
// (not added): (exp(z - lse) - q) dloss / count on counted rows, 0 on
// padding. It may overwrite the logits (inplace_input 0): with the logits'
// last reader being the backward, the logits and their gradient share one
// buffer and no [R, V] probabilities exist at any time.
#include "ops/common/op_common.hpp"

namespace memfit {

void register_xent_rows_ops() {
  OpDef x;
  x.name = "xent_rows";
  x.infer = [](const Graph& g, const Node& n) {
    const Shape& z = in_shape(g, n, 0);
    if (z.size() < 2 || in_dtype(g, n, 0) != DType::f32)
      shape_fail(g, n, "xent_rows expects f32 logits [rows..., classes], got " + shape_str(z));
    const Shape want(z.begin(), z.end() - 1);
    if (in_shape(g, n, 1) != want || in_dtype(g, n, 1) != DType::i32)
      shape_fail(g, n, "targets must be i32 " + shape_str(want) + " (the logits' shape without the class axis)");
    return std::vector<ValueMeta>{{Shape{1}, DType::f32}, {want, DType::f32}};
  };
  x.grad = [](GradContext& c) {
    std::vector<ValueId> r{kNone, kNone};
    if (c.out_grads[0] != kNone && c.need[0])
      r[0] = c.emit1("xent_rows_bwd", {c.in(0), c.out(1), c.in(1), c.out_grads[0]}, c.fwd().attrs);
    return r;
  };
  // max, exp and two sums per element
  x.flops = [](const Graph& g, const Node& n) { return 4.0 * static_cast<double>(numel(in_shape(g, n, 0))); };
  register_op(x);

  OpDef b;
  b.name = "xent_rows_bwd";
  b.traits.inplace_input = 0;  // dlogits may overwrite the logits
  b.traits.no_gradient = true;
  b.infer = [](const Graph& g, const Node& n) { return same_as(g, n, 0); };
  b.flops = [](const Graph& g, const Node& n) { return 3.0 * static_cast<double>(numel(in_shape(g, n, 0))); };
  register_op(b);
}

}  // namespace memfit
