// linear (y = x w^T + b over the last axis) and batched matmul.
// M rows (all leading axes of x), K input features, N output features.
#include "ops/common/op_common.hpp"

namespace memfit {
namespace {

std::vector<ValueMeta> infer_linear(const Graph& g, const Node& n) {
  if (n.inputs.size() != 2 && n.inputs.size() != 3) shape_fail(g, n, "linear takes x, w and optional b");
  const Shape& x = in_shape(g, n, 0);
  const Shape& w = in_shape(g, n, 1);
  if (x.empty() || w.size() != 2) shape_fail(g, n, "linear needs x[..., K] and w[N, K]");
  if (x.back() != w[1])
    shape_fail(g, n, "input has " + std::to_string(x.back()) + " features but the weight " + shape_str(w) +
                         " expects " + std::to_string(w[1]));
  if (n.inputs.size() == 3 && in_shape(g, n, 2) != Shape{w[0]})
    shape_fail(g, n, "bias must be [" + std::to_string(w[0]) + "]");
  Shape y = x;
  y.back() = w[0];
  return {{y, in_dtype(g, n, 0)}};
}

std::vector<ValueId> grad_linear(GradContext& c) {
  const Node& n = c.fwd();
  std::vector<ValueId> r(n.inputs.size(), kNone);
  ValueId dy = c.out_grads[0];
  if (dy == kNone) return r;
  // Read n before emitting: emitting appends nodes and may move it.
  bool need_b = n.inputs.size() == 3 && c.need[2];
  if (c.need[0]) r[0] = c.emit1("linear_bwd_data", {dy, c.in(1)});
  if (c.need[1] || need_b) {
    auto outs = c.emit("linear_bwd_weight", {c.in(0), dy}, {{"bias", int64_t(need_b)}});
    if (c.need[1]) r[1] = outs[0];
    if (need_b) r[2] = outs[1];
  }
  return r;
}

double flops_linear(const Graph& g, const Node& n) {
  return 2.0 * static_cast<double>(numel(in_shape(g, n, 0))) * static_cast<double>(in_shape(g, n, 1)[0]);
}

// matmul: a[..., M, K] x b[..., K, N] (trans flags swap the last two axes).
// Leading axes must match, or one operand has none (it is broadcast).
std::vector<ValueMeta> infer_matmul(const Graph& g, const Node& n) {
  const Shape& a = in_shape(g, n, 0);
  const Shape& b = in_shape(g, n, 1);
  if (a.size() < 2 || b.size() < 2) shape_fail(g, n, "matmul operands need rank >= 2");
  bool ta = n.attrs.i("trans_a", 0), tb = n.attrs.i("trans_b", 0);
  int64_t m = ta ? a[a.size() - 1] : a[a.size() - 2];
  int64_t ka = ta ? a[a.size() - 2] : a[a.size() - 1];
  int64_t kb = tb ? b[b.size() - 1] : b[b.size() - 2];
  int64_t nn = tb ? b[b.size() - 2] : b[b.size() - 1];
  if (ka != kb) shape_fail(g, n, "inner dimensions differ: " + std::to_string(ka) + " vs " + std::to_string(kb));
  Shape ba(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  if (!ba.empty() && !bb.empty() && ba != bb) shape_fail(g, n, "batch axes differ");
  Shape y = ba.empty() ? bb : ba;
  y.push_back(m);
  y.push_back(nn);
  return {{y, in_dtype(g, n, 0)}};
}

// The gradient of a broadcast operand (no batch axes, while the other has
// them) is a sum over the batch, computed as one 2-D matmul with the batch
// folded into the contracted axis: C_b = op(A_b) op(B) gives
// dop(B) = sum_b op(A_b)^T dC_b = A2^T dC2, with A2 = A viewed as
// [batch*M, K] and dC2 = dC as [batch*M, N] (free views). Where the layout
// does not put the batch next to the contracted axis (a transposed A for dB;
// dC, whose rows are M, for dA) the operand is first permuted, a copy:
// [..., X, Y] -> [X, ..., Y], viewed as [X, batch*Y].

// v[..., X, Y] viewed as [batch*X, Y].
ValueId batch_rows(GradContext& c, ValueId v) {
  const Shape s = c.g.value(v).shape;
  return c.emit1("reshape", {v}, {{"shape", Shape{numel(s) / s.back(), s.back()}}});
}

// v[..., X, Y] as [X, batch*Y] (the batch axes moved after X).
ValueId batch_cols(GradContext& c, ValueId v) {
  const Shape s = c.g.value(v).shape;
  const int64_t r = static_cast<int64_t>(s.size());
  std::vector<int64_t> perm{r - 2};
  for (int64_t d = 0; d < r - 2; ++d) perm.push_back(d);
  perm.push_back(r - 1);
  const ValueId p = c.emit1("permute", {v}, {{"perm", perm}});
  const int64_t x = s[static_cast<size_t>(r - 2)];
  return c.emit1("reshape", {p}, {{"shape", Shape{x, numel(s) / x}}});
}

ValueId mm(GradContext& c, ValueId a, ValueId b, bool ta, bool tb) {
  return c.emit1("matmul", {a, b}, {{"trans_a", int64_t(ta)}, {"trans_b", int64_t(tb)}});
}

// d, cast to the type of the operand it is the gradient of where the two
// differ (a matmul's output takes its first operand's type: an f32 weight
// times bf16 activations gets its gradient in f32, like linear's weight). A
// parameter's gradient is f32 whatever the parameter's storage (bf16 master
// weights are updated from f32 gradients).
ValueId typed_like(GradContext& c, ValueId d, ValueId operand) {
  const DType want = grad_dtype(c.g, operand);
  if (c.g.value(d).dtype == want) return d;
  return c.emit1("cast", {d}, {{"dtype", int64_t(want)}});
}

std::vector<ValueId> grad_matmul(GradContext& c) {
  std::vector<ValueId> r(2, kNone);
  ValueId dc = c.out_grads[0];
  if (dc == kNone) return r;
  bool ta = c.fwd().attrs.i("trans_a", 0), tb = c.fwd().attrs.i("trans_b", 0);
  ValueId a = c.in(0), b = c.in(1);
  bool b_broadcast = c.g.value(b).shape.size() < c.g.value(a).shape.size();
  bool a_broadcast = c.g.value(a).shape.size() < c.g.value(b).shape.size();
  // C = op(A) op(B).  dA = dC op(B)^T (transposed back if ta); dB likewise.
  // With ta and a broadcast b, dA = op(B) dC^T has b as a broadcast *first*
  // operand, which is why either operand may be the broadcast one.
  if (c.need[0]) {
    if (a_broadcast) {
      // dop(A) = sum_b dC_b op(B_b)^T: contracted over (batch, N).
      const ValueId dc2 = batch_cols(c, dc);  // [M, batch*N]
      if (tb) {
        const ValueId b2 = batch_rows(c, b);  // [batch*N, K]
        r[0] = ta ? mm(c, b2, dc2, true, true) : mm(c, dc2, b2, false, false);
      } else {
        const ValueId b2 = batch_cols(c, b);  // [K, batch*N]
        r[0] = ta ? mm(c, b2, dc2, false, true) : mm(c, dc2, b2, false, true);
      }
    } else if (!ta) {
      r[0] = mm(c, dc, b, false, !tb);
    } else {
      r[0] = mm(c, b, dc, tb, true);
    }
    r[0] = typed_like(c, r[0], a);
  }
  if (c.need[1]) {
    if (b_broadcast) {
      // dop(B) = sum_b op(A_b)^T dC_b: contracted over (batch, M).
      const ValueId dc2 = batch_rows(c, dc);  // [batch*M, N]
      if (!ta) {
        const ValueId a2 = batch_rows(c, a);  // [batch*M, K]
        r[1] = tb ? mm(c, dc2, a2, true, false) : mm(c, a2, dc2, true, false);
      } else {
        const ValueId a2 = batch_cols(c, a);  // [K, batch*M]
        r[1] = tb ? mm(c, dc2, a2, true, true) : mm(c, a2, dc2, false, false);
      }
    } else if (!tb) {
      r[1] = mm(c, a, dc, !ta, false);
    } else {
      r[1] = mm(c, dc, a, true, ta);
    }
    r[1] = typed_like(c, r[1], b);
  }
  return r;
}

}  // namespace

void register_linear_ops() {
  OpTraits fwd;
  fwd.heavy = true;
  fwd.low_precision_weights = {1};
  register_op({"linear", infer_linear, grad_linear, fwd, flops_linear});
  OpTraits bwd_data;
  bwd_data.no_gradient = true;
  bwd_data.low_precision_weights = {1};
  OpTraits bwd_weight;
  bwd_weight.no_gradient = true;
  OpTraits mm;
  mm.heavy = true;
  mm.low_precision_weights = {0, 1};
  register_op({"linear_bwd_data",
               [](const Graph& g, const Node& n) {
                 Shape dx = in_shape(g, n, 0);
                 dx.back() = in_shape(g, n, 1)[1];
                 return std::vector<ValueMeta>{{dx, in_dtype(g, n, 0)}};
               },
               {}, bwd_data,
               [](const Graph& g, const Node& n) {
                 return 2.0 * static_cast<double>(numel(in_shape(g, n, 0))) * static_cast<double>(in_shape(g, n, 1)[1]);
               }});
  register_op({"linear_bwd_weight",
               [](const Graph& g, const Node& n) {
                 const Shape& x = in_shape(g, n, 0);
                 const Shape& dy = in_shape(g, n, 1);
                 // Parameter gradients are f32 like the parameters.
                 std::vector<ValueMeta> r{{Shape{dy.back(), x.back()}, DType::f32}};
                 if (n.attrs.i("bias", 0)) r.push_back({Shape{dy.back()}, DType::f32});
                 return r;
               },
               {}, bwd_weight,
               [](const Graph& g, const Node& n) {
                 return 2.0 * static_cast<double>(numel(in_shape(g, n, 0))) * static_cast<double>(in_shape(g, n, 1).back());
               }});
  register_op({"matmul", infer_matmul, grad_matmul, mm,
               [](const Graph& g, const Node& n) {
                 const Shape& a = in_shape(g, n, 0);
                 bool ta = n.attrs.i("trans_a", 0);
                 int64_t k = ta ? a[a.size() - 2] : a.back();
                 return 2.0 * static_cast<double>(numel(g.value(n.outputs[0]).shape)) * static_cast<double>(k);
               }});
}

}  // namespace memfit
