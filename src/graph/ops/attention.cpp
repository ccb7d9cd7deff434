// attention: scaled dot-product attention as one fused op that never holds
// the B x H x T x S probabilities (kernels/params_attention.hpp states the
// exact semantics; the kernels tile or go row by row).
// B batch, H heads, T queries, S keys, D query/key width, Dv value width.
//
//   attention      in: q[B,H,T,D], k[B,H,S,D], v[B,H,S,Dv] (float, one type),
//                      optional key mask[B,S] (i32: nonzero attends)
//                  out: out[B,H,T,Dv] (q's type), lse[B,H,T] (f32 log-sum-exp
//                      of each row's scaled, masked scores: the softmax the
//                      backward recomputes)
//                  attrs: causal (0/1), scale, dropout (p on the
//                      probabilities), stream (hash of the layer name)
//   attention_bwd  in: q, k, v, out, lse, dout[, mask]  out: dq, dk, dv
//
// Only out and lse outlive the forward; the backward recomputes the
// probabilities block by block from q, k and lse. The lse output carries no
// gradient: a graph whose loss depends on it is refused.
#include <cmath>

#include "graph/ops/common.hpp"

namespace memfit {
namespace {

struct Dims {
  int64_t B, H, T, S, D, Dv;
};

// Checks q, k, v (inputs 0..2) and the optional mask at input mask_at.
Dims check_qkv(const Graph& g, const Node& n, size_t mask_at) {
  for (size_t i = 0; i < 3; ++i) expect_rank(g, n, i, 4);
  const Shape &q = in_shape(g, n, 0), &k = in_shape(g, n, 1), &v = in_shape(g, n, 2);
  const DType t = in_dtype(g, n, 0);
  if (!is_float(t) || in_dtype(g, n, 1) != t || in_dtype(g, n, 2) != t)
    shape_fail(g, n, "attention needs q, k, v of one float type");
  if (k[0] != q[0] || k[1] != q[1] || k[3] != q[3])
    shape_fail(g, n, "attention needs k [B, H, S, D] matching q [B, H, T, D]");
  if (v[0] != q[0] || v[1] != q[1] || v[2] != k[2]) shape_fail(g, n, "attention needs v [B, H, S, Dv] matching k");
  for (int64_t d : {q[0], q[1], q[2], q[3], k[2], v[3]})
    if (d < 1) shape_fail(g, n, "attention needs non-empty q, k, v");
  if (n.inputs.size() > mask_at) {
    const Shape& m = in_shape(g, n, mask_at);
    if (in_dtype(g, n, mask_at) != DType::i32 || m != Shape{q[0], k[2]})
      shape_fail(g, n, "attention's key mask must be i32 [B, S]");
  }
  const double p = n.attrs.f("dropout", 0.0);
  if (!(p >= 0.0 && p < 1.0)) shape_fail(g, n, "attention dropout must be in [0, 1)");
  if (n.attrs.has("scale") && !std::isfinite(n.attrs.f("scale"))) shape_fail(g, n, "attention scale must be finite");
  return {q[0], q[1], q[2], k[2], q[3], v[3]};
}

// Multiply-adds x2 of the two products (q k^T and p v), about half of them
// under the causal mask when T ~ S.
double attention_flops(const Graph& g, const Node& n, double products) {
  const Shape &q = in_shape(g, n, 0), &k = in_shape(g, n, 1), &v = in_shape(g, n, 2);
  const double rows = static_cast<double>(q[0] * q[1] * q[2]) * static_cast<double>(k[2]);
  double f = products * rows * static_cast<double>(q[3] + v[3]) + 10.0 * rows;  // + exp per score
  if (n.attrs.i("causal", 0)) f *= 0.5;
  return f;
}

}  // namespace

void register_attention_ops() {
  OpDef a;
  a.name = "attention";
  a.infer = [](const Graph& g, const Node& n) {
    if (n.inputs.size() != 3 && n.inputs.size() != 4) shape_fail(g, n, "attention takes q, k, v and an optional mask");
    const Dims d = check_qkv(g, n, 3);
    return std::vector<ValueMeta>{{{d.B, d.H, d.T, d.Dv}, in_dtype(g, n, 0)}, {{d.B, d.H, d.T}, DType::f32}};
  };
  a.traits.heavy = true;
  a.grad = [](GradContext& c) {
    const Node& f = c.fwd();
    std::vector<ValueId> r(f.inputs.size(), kNone);
    if (c.out_grads.size() > 1 && c.out_grads[1] != kNone)
      shape_fail(c.g, f, "attention's lse output has no gradient; the loss must not depend on it");
    if (c.out_grads[0] == kNone || !(c.need[0] || c.need[1] || c.need[2])) return r;
    std::vector<ValueId> ins{c.in(0), c.in(1), c.in(2), c.out(0), c.out(1), c.out_grads[0]};
    if (f.inputs.size() == 4) ins.push_back(c.in(3));
    const auto g = c.emit("attention_bwd", std::move(ins), f.attrs);
    for (size_t i = 0; i < 3; ++i)
      if (c.need[i]) r[i] = g[i];
    return r;
  };
  // q k^T (T S D multiply-adds) and P v (T S Dv), x2: 4 T S D per (b, h) when Dv = D.
  a.flops = [](const Graph& g, const Node& n) { return attention_flops(g, n, 2.0); };
  register_op(a);

  OpDef b;
  b.name = "attention_bwd";
  b.traits.no_gradient = true;
  b.traits.heavy = true;
  b.infer = [](const Graph& g, const Node& n) {
    if (n.inputs.size() != 6 && n.inputs.size() != 7)
      shape_fail(g, n, "attention_bwd takes q, k, v, out, lse, dout and an optional mask");
    const Dims d = check_qkv(g, n, 6);
    const Shape o{d.B, d.H, d.T, d.Dv};
    if (in_shape(g, n, 3) != o || in_shape(g, n, 5) != o || in_dtype(g, n, 3) != in_dtype(g, n, 0) ||
        in_dtype(g, n, 5) != in_dtype(g, n, 0))
      shape_fail(g, n, "attention_bwd needs out and dout [B, H, T, Dv] of q's type");
    if (in_shape(g, n, 4) != Shape{d.B, d.H, d.T} || in_dtype(g, n, 4) != DType::f32)
      shape_fail(g, n, "attention_bwd needs lse f32 [B, H, T]");
    return std::vector<ValueMeta>{same_as(g, n, 0)[0], same_as(g, n, 1)[0], same_as(g, n, 2)[0]};
  };
  // Recomputes q k^T, then dout v^T, dv, dq and dk: five products (~2.5x the forward).
  b.flops = [](const Graph& g, const Node& n) { return attention_flops(g, n, 5.0); };
  register_op(b);
}

}  // namespace memfit
