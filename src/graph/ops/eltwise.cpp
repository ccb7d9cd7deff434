// Element-wise ops: relu, add, scale, fill. Any shape; n = number of elements.
#include "graph/ops/common.hpp"

namespace memfit {
namespace {

std::vector<ValueMeta> infer_add(const Graph& g, const Node& n) {
  if (n.inputs.size() != 2) shape_fail(g, n, "add takes two inputs");
  if (in_shape(g, n, 0) != in_shape(g, n, 1))
    shape_fail(g, n, "cannot add " + shape_str(in_shape(g, n, 0)) + " and " + shape_str(in_shape(g, n, 1)));
  return same_as(g, n, 0);
}

}  // namespace

void register_eltwise_ops() {
  OpDef relu = simple_op("relu", 0);
  relu.grad = [](GradContext& c) {
    std::vector<ValueId> r{kNone};
    if (c.out_grads[0] != kNone && c.need[0]) r[0] = c.emit1("relu_bwd", {c.out(0), c.out_grads[0]});
    return r;
  };
  register_op(relu);
  // relu_bwd(y, dy): dx may overwrite dy.
  register_op(simple_op("relu_bwd", 1));

  OpDef add = simple_op("add", 0);
  add.infer = infer_add;
  add.grad = [](GradContext& c) {
    ValueId d = c.out_grads[0];
    return std::vector<ValueId>{c.need[0] ? d : kNone, c.need[1] ? d : kNone};
  };
  register_op(add);

  OpDef scale = simple_op("scale", 0);
  scale.grad = [](GradContext& c) {
    std::vector<ValueId> r{kNone};
    if (c.out_grads[0] != kNone && c.need[0])
      r[0] = c.emit1("scale", {c.out_grads[0]}, {{"alpha", c.fwd().attrs.f("alpha")}});
    return r;
  };
  register_op(scale);

  OpDef fill;
  fill.name = "fill";
  fill.infer = [](const Graph&, const Node& n) {
    return std::vector<ValueMeta>{{n.attrs.ints("shape"), DType::f32}};
  };
  register_op(fill);
}

}  // namespace memfit
