// xent_metrics: what evaluation reports, computed in the graph so that only
// three scalars leave the device (a language model's logits are [N, T, V]).
// Inputs logits[..., C] (f32), labels[...] (i32, the logits' shape without
// its last axis). Outputs, each f32 [1]: loss_sum (the sum over counted rows
// of -log softmax(z)[label]), correct (rows whose first maximum is the
// label) and count (rows counted). A row with a negative label is padding
// (a partial last batch, a padded sequence) and is not counted; a label >= C
// is a mistake and makes loss_sum NaN, as in softmax_xent.
#include "ops/common/op_common.hpp"

namespace memfit {

void register_metrics_ops() {
  OpDef m;
  m.name = "xent_metrics";
  m.traits.no_gradient = true;  // a metric: evaluation only
  m.infer = [](const Graph& g, const Node& n) {
    const Shape& z = in_shape(g, n, 0);
    if (z.empty() || in_dtype(g, n, 0) != DType::f32)
      shape_fail(g, n, "xent_metrics expects f32 logits [..., classes], got " + shape_str(z));
    const Shape want(z.begin(), z.end() - 1);
    if (in_shape(g, n, 1) != want || in_dtype(g, n, 1) != DType::i32)
      shape_fail(g, n, "labels must be i32 " + shape_str(want) + " (the logits' shape without the class axis)");
    const ValueMeta scalar{Shape{1}, DType::f32};
    return std::vector<ValueMeta>{scalar, scalar, scalar};
  };
  m.flops = [](const Graph& g, const Node& n) { return 3.0 * static_cast<double>(numel(in_shape(g, n, 0))); };
  register_op(m);
}

}  // namespace memfit
