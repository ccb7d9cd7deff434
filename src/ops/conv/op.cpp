// conv2d and its two backward ops.
// N batch, C input channels, H/W input size, K output channels, R/S kernel size.
#include "ops/common/op_common.hpp"

namespace memfit {
namespace {

// The output size, or 0 where the arithmetic would leave 64-bit integers
// (sizes no file can hold: refused as a kernel that does not fit).
int64_t out_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil) {
  int64_t span = 0, reach = 0, padded = 0;
  if (__builtin_mul_overflow(dil, k - 1, &reach) || __builtin_mul_overflow(pad, int64_t(2), &padded) ||
      __builtin_add_overflow(in, padded, &span) || __builtin_sub_overflow(span, reach, &span) || __builtin_sub_overflow(span, int64_t(1), &span))
    return 0;
  return span / stride + 1;
}

std::vector<ValueMeta> infer_conv(const Graph& g, const Node& n) {
  if (n.inputs.size() != 2 && n.inputs.size() != 3) shape_fail(g, n, "conv2d takes x, w and optional b");
  expect_rank(g, n, 0, 4);
  expect_rank(g, n, 1, 4);
  const Shape& x = g.value(n.inputs[0]).shape;
  const Shape& w = g.value(n.inputs[1]).shape;
  auto st = n.attrs.ints("stride"), pd = n.attrs.ints("pad"), dl = n.attrs.ints("dilation");
  int64_t groups = n.attrs.i("groups", 1);
  if (st.size() != 2 || pd.size() != 2 || dl.size() != 2) shape_fail(g, n, "stride, pad and dilation take two values");
  for (int a = 0; a < 2; ++a)
    if (st[a] < 1 || pd[a] < 0 || dl[a] < 1)
      shape_fail(g, n, "stride and dilation must be >= 1 and pad >= 0, got stride " + std::to_string(st[a]) +
                           ", pad " + std::to_string(pd[a]) + ", dilation " + std::to_string(dl[a]));
  if (groups < 1 || x[1] % groups || w[0] % groups)
    shape_fail(g, n, "channels " + std::to_string(x[1]) + " -> " + std::to_string(w[0]) +
                         " are not divisible by groups " + std::to_string(groups));
  if (w[1] * groups != x[1])
    shape_fail(g, n, "input has " + std::to_string(x[1]) + " channels but the weight " +
                         shape_str(w) + " expects " + std::to_string(w[1] * groups));
  if (n.inputs.size() == 3) {
    const Shape& b = g.value(n.inputs[2]).shape;
    if (b != Shape{w[0]}) shape_fail(g, n, "bias shape " + shape_str(b) + " must be [" + std::to_string(w[0]) + "]");
  }
  int64_t oh = out_size(x[2], w[2], st[0], pd[0], dl[0]);
  int64_t ow = out_size(x[3], w[3], st[1], pd[1], dl[1]);
  if (oh <= 0 || ow <= 0)
    shape_fail(g, n, "kernel " + shape_str(w) + " does not fit input " + shape_str(x));
  return {{Shape{x[0], w[0], oh, ow}, g.value(n.inputs[0]).dtype}};
}

std::vector<ValueId> grad_conv(GradContext& c) {
  const Node& n = c.fwd();
  std::vector<ValueId> r(n.inputs.size(), kNone);
  ValueId dy = c.out_grads[0];
  if (dy == kNone) return r;
  Attrs a = n.attrs;
  // Read n before emitting: emitting appends nodes and may move it.
  bool need_w = c.need[1], need_b = n.inputs.size() == 3 && c.need[2];
  if (c.need[0]) {
    Attrs ad = a;
    ad.set("x_shape", c.g.value(c.in(0)).shape);
    r[0] = c.emit1("conv2d_bwd_data", {dy, c.in(1)}, ad);
  }
  if (need_w || need_b) {
    Attrs aw = a;
    aw.set("w_shape", c.g.value(c.in(1)).shape);
    aw.set("bias", int64_t(need_b ? 1 : 0));
    auto outs = c.emit("conv2d_bwd_weight", {c.in(0), dy}, aw);
    if (need_w) r[1] = outs[0];
    if (need_b) r[2] = outs[1];
  }
  return r;
}

double flops_conv(const Graph& g, const Node& n) {
  const Shape& y = g.value(n.outputs[0]).shape;
  const Shape& w = g.value(n.inputs[1]).shape;
  return 2.0 * static_cast<double>(numel(y)) * static_cast<double>(w[1] * w[2] * w[3]);
}

}  // namespace

void register_conv_ops() {
  OpTraits fwd;
  fwd.heavy = true;
  fwd.low_precision_weights = {1};
  register_op({"conv2d", infer_conv, grad_conv, fwd, flops_conv});
  OpTraits bwd_data;
  bwd_data.no_gradient = true;
  bwd_data.low_precision_weights = {1};
  OpTraits bwd_weight;
  bwd_weight.no_gradient = true;
  register_op({"conv2d_bwd_data",
               [](const Graph& g, const Node& n) {
                 return std::vector<ValueMeta>{{n.attrs.ints("x_shape"), g.value(n.inputs[0]).dtype}};
               },
               {}, bwd_data,
               [](const Graph& g, const Node& n) {
                 const Shape& dy = g.value(n.inputs[0]).shape;
                 const Shape& w = g.value(n.inputs[1]).shape;
                 return 2.0 * static_cast<double>(numel(dy)) * static_cast<double>(w[1] * w[2] * w[3]);
               }});
  register_op({"conv2d_bwd_weight",
               [](const Graph&, const Node& n) {
                 // Parameters (and so their gradients) are always f32, whatever
                 // the activations' type (mixed precision keeps f32 masters).
                 std::vector<ValueMeta> r{{n.attrs.ints("w_shape"), DType::f32}};
                 if (n.attrs.i("bias", 0)) r.push_back({Shape{n.attrs.ints("w_shape")[0]}, r[0].dtype});
                 return r;
               },
               {}, bwd_weight,
               [](const Graph& g, const Node& n) {
                 const Shape& dy = g.value(n.inputs[1]).shape;
                 const Shape& w = n.attrs.ints("w_shape");
                 return 2.0 * static_cast<double>(numel(dy)) * static_cast<double>(w[1] * w[2] * w[3]);
               }});
}

}  // namespace memfit
