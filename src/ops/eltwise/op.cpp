// Element-wise ops: relu, add, scale, fill, cast. Any shape; n = number of elements.
#include "ops/common/op_common.hpp"

namespace memfit {
namespace {

std::vector<ValueMeta> infer_add(const Graph& g, const Node& n) {
  if (n.inputs.size() != 2) shape_fail(g, n, "add takes two inputs");
  if (in_shape(g, n, 0) != in_shape(g, n, 1))
    shape_fail(g, n, "cannot add " + shape_str(in_shape(g, n, 0)) + " and " + shape_str(in_shape(g, n, 1)));
  if (in_dtype(g, n, 0) != in_dtype(g, n, 1))
    shape_fail(g, n, std::string("cannot add ") + dtype_name(in_dtype(g, n, 0)) + " and " + dtype_name(in_dtype(g, n, 1)));
  return same_as(g, n, 0);
}

}  // namespace

void register_eltwise_ops() {
  OpDef relu = simple_op("relu", 0);
  relu.traits.no_gradient = false;
  relu.traits.commutes_with_max_pool = true;
  relu.grad = [](GradContext& c) {
    std::vector<ValueId> r{kNone};
    if (c.out_grads[0] != kNone && c.need[0]) r[0] = c.emit1("relu_bwd", {c.out(0), c.out_grads[0]});
    return r;
  };
  register_op(relu);
  // relu_bwd(y, dy): dx may overwrite dy.
  OpDef relu_bwd = simple_op("relu_bwd", 1);
  register_op(relu_bwd);

  OpDef add = simple_op("add", 0);
  add.traits.no_gradient = false;
  add.infer = infer_add;
  add.grad = [](GradContext& c) {
    ValueId d = c.out_grads[0];
    return std::vector<ValueId>{c.need[0] ? d : kNone, c.need[1] ? d : kNone};
  };
  register_op(add);

  OpDef scale = simple_op("scale", 0);
  scale.traits.no_gradient = false;
  scale.grad = [](GradContext& c) {
    std::vector<ValueId> r{kNone};
    if (c.out_grads[0] != kNone && c.need[0])
      r[0] = c.emit1("scale", {c.out_grads[0]}, {{"alpha", c.fwd().attrs.f("alpha")}});
    return r;
  };
  register_op(scale);

  OpDef fill;
  fill.name = "fill";
  fill.traits.no_gradient = true;
  fill.infer = [](const Graph&, const Node& n) {
    return std::vector<ValueMeta>{{n.attrs.ints("shape"), DType::f32}};
  };
  register_op(fill);

  // cast(x): x converted to attr "dtype" (an int holding a DType). Rounding
  // to a narrower float type is round-to-nearest-even (kernels/bf16.hpp).
  // The gradient casts back to x's type. With attr grad_loss_scale = 1 (the
  // cast of the logits to f32 for the loss), that gradient cast multiplies
  // by the step's loss scale (attr loss_scale = 1 on it): dynamic loss
  // scaling for fp16 starts where the gradients enter low precision.
  OpDef cast;
  cast.name = "cast";
  cast.traits.converts_types = true;
  cast.traits.reference_serves_cpu = true;  // one lowering (runtime/mixed.cpp) serves every backend
  cast.infer = [](const Graph& g, const Node& n) {
    const auto to = static_cast<DType>(n.attrs.i("dtype"));
    if (!is_float(in_dtype(g, n, 0)) || !is_float(to)) shape_fail(g, n, "cast converts between float types only");
    return std::vector<ValueMeta>{{in_shape(g, n, 0), to}};
  };
  cast.grad = [](GradContext& c) {
    std::vector<ValueId> r{kNone};
    if (c.out_grads[0] != kNone && c.need[0])
      r[0] = c.emit1("cast", {c.out_grads[0]},
                     {{"dtype", int64_t(c.g.value(c.in(0)).dtype)}, {"loss_scale", c.fwd().attrs.i("grad_loss_scale", 0)}});
    return r;
  };
  register_op(cast);
}

}  // namespace memfit
