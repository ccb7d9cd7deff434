// softmax over the last axis of an N-d input (attention). y = exp(x - max) /
// sum exp(x - max) per row. The backward softmax_bwd(y, dy) reads only the
// output, so the forward may overwrite its input.
// R rows (every axis but the last, multiplied), D the last axis.
#include "ops/common/op_last_axis.hpp"

namespace memfit {

void register_softmax_ops() {
  OpDef sm = simple_op("softmax", 0);  // y may overwrite x: the backward reads y only
  sm.traits.no_gradient = false;
  sm.infer = [](const Graph& g, const Node& n) {
    if (n.inputs.size() != 1) shape_fail(g, n, "softmax takes one input");
    last_axis_rows(g, n);
    return same_as(g, n, 0);
  };
  sm.grad = [](GradContext& c) {
    std::vector<ValueId> r{kNone};
    if (c.out_grads[0] != kNone && c.need[0]) r[0] = c.emit1("softmax_bwd", {c.out(0), c.out_grads[0]});
    return r;
  };
  // max, exp (twice: for the sum and for y, ~10 multiply-adds each), sum, scale.
  sm.flops = [](const Graph& g, const Node& n) { return 44.0 * static_cast<double>(numel(in_shape(g, n, 0))); };
  register_op(sm);

  // softmax_bwd(y, dy) -> dx = y (dy - sum dy y); dx may overwrite dy.
  OpDef bwd = simple_op("softmax_bwd", 1);
  bwd.infer = [](const Graph& g, const Node& n) {
    if (n.inputs.size() != 2) shape_fail(g, n, "softmax_bwd takes y, dy");
    last_axis_rows(g, n);
    expect_like(g, n, 1, 0, "dy must have y's");
    return same_as(g, n, 1);
  };
  bwd.flops = [](const Graph& g, const Node& n) { return 4.0 * static_cast<double>(numel(in_shape(g, n, 0))); };
  register_op(bwd);
}

}  // namespace memfit
