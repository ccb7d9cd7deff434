// add_broadcast: y = a + b with b broadcast over a's leading axes (a bias,
// a position table's rows): a [..., S...], b [S...] (b's shape is a's
// trailing axes). Its gradient for b sums dy over the leading axes:
// sum_leading [R..., S...] -> [S...], stored as attribute "dtype" (b's type;
// default: the input's). expand_leading: x [S...] repeated to attribute
// "shape" [R..., S...] (a class token over the batch); its gradient is
// sum_leading back to x's shape.
#include "ops/common/op_common.hpp"

namespace memfit {

void register_broadcast_ops() {
  OpDef add = simple_op("add_broadcast", 0);  // y may overwrite a
  add.traits.no_gradient = false;
  add.traits.low_precision_weights = {1};  // a bias meets the activations in their type
  add.infer = [](const Graph& g, const Node& n) {
    if (n.inputs.size() != 2) shape_fail(g, n, "add_broadcast takes a and b");
    const Shape& a = in_shape(g, n, 0);
    const Shape& b = in_shape(g, n, 1);
    if (b.empty() || b.size() > a.size() || !std::equal(b.begin(), b.end(), a.end() - static_cast<int64_t>(b.size())))
      shape_fail(g, n, "cannot broadcast " + shape_str(b) + " over " + shape_str(a) +
                           ": b must be a's trailing axes");
    // b may be an f32 parameter under bf16/fp16 activations: the kernels
    // see it rounded to their type (low_precision_weights).
    if (!is_float(in_dtype(g, n, 0)) || !is_float(in_dtype(g, n, 1)))
      shape_fail(g, n, std::string("cannot add ") + dtype_name(in_dtype(g, n, 0)) + " and " +
                           dtype_name(in_dtype(g, n, 1)));
    return same_as(g, n, 0);
  };
  add.grad = [](GradContext& c) {
    std::vector<ValueId> r{kNone, kNone};
    const ValueId d = c.out_grads[0];
    if (d == kNone) return r;
    if (c.need[0]) r[0] = d;
    // The sum has the type of b's gradient (a parameter's gradient is f32
    // under bf16 activations and bf16 master weights: grad_dtype).
    const Value& bv = c.g.value(c.in(1));
    if (c.need[1])
      r[1] = c.emit1("sum_leading", {d}, {{"shape", bv.shape}, {"dtype", int64_t(grad_dtype(c.g, c.in(1)))}});
    return r;
  };
  add.flops = [](const Graph& g, const Node& n) { return static_cast<double>(numel(in_shape(g, n, 0))); };
  register_op(add);

  OpDef expand = simple_op("expand_leading");
  expand.traits.no_gradient = false;
  expand.traits.reference_serves_cpu = true;  // a copy of x per row
  expand.infer = [](const Graph& g, const Node& n) {
    const Shape& x = in_shape(g, n, 0);
    const Shape& s = n.attrs.ints("shape");
    if (x.empty() || x.size() > s.size() || !std::equal(x.begin(), x.end(), s.end() - static_cast<int64_t>(x.size())))
      shape_fail(g, n, "cannot expand " + shape_str(x) + " to " + shape_str(s) + ": x must be the trailing axes");
    for (int64_t d : s)
      if (d < 1) shape_fail(g, n, "cannot expand to " + shape_str(s));
    return std::vector<ValueMeta>{{s, in_dtype(g, n, 0)}};
  };
  expand.grad = [](GradContext& c) {
    std::vector<ValueId> r{kNone};
    if (c.out_grads[0] != kNone && c.need[0])
      r[0] = c.emit1("sum_leading", {c.out_grads[0]},
                     {{"shape", c.g.value(c.in(0)).shape}, {"dtype", int64_t(grad_dtype(c.g, c.in(0)))}});
    return r;
  };
  expand.flops = [](const Graph& g, const Node& n) { return static_cast<double>(numel(n.attrs.ints("shape"))); };
  register_op(expand);

  OpDef sum;
  sum.name = "sum_leading";
  sum.traits.no_gradient = true;  // a backward op
  sum.infer = [](const Graph& g, const Node& n) {
    const Shape& x = in_shape(g, n, 0);
    const Shape& s = n.attrs.ints("shape");
    if (s.empty() || s.size() > x.size() || !std::equal(s.begin(), s.end(), x.end() - static_cast<int64_t>(s.size())))
      shape_fail(g, n, "cannot sum " + shape_str(x) + " to " + shape_str(s));
    const DType t = n.attrs.has("dtype") ? static_cast<DType>(n.attrs.i("dtype")) : in_dtype(g, n, 0);
    return std::vector<ValueMeta>{{s, t}};
  };
  sum.flops = [](const Graph& g, const Node& n) { return static_cast<double>(numel(in_shape(g, n, 0))); };
  register_op(sum);
}

}  // namespace memfit
