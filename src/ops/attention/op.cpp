// attention: scaled dot-product attention as one fused op that never holds
// the B x H x T x S probabilities (ops/attention/params.hpp states the
// exact semantics; the kernels tile or go row by row).
// B batch, H heads, T queries, S keys, D query/key width, Dv value width.
//
//   attention      in: q, k, v (one float type) or, with layout "packed",
//                      qkv; then an optional key mask[B,S] (i32: nonzero
//                      attends)
//                  out: out (q's type), lse[B,H,T] (f32 log-sum-exp of each
//                      row's scaled, masked scores: the softmax the backward
//                      recomputes)
//                  attrs: causal (0/1), scale, dropout (p on the
//                      probabilities), stream (hash of the layer name),
//                      layout: "bhtd" (default: q[B,H,T,D], k[B,H,S,D],
//                      v[B,H,S,Dv], out[B,H,T,Dv]), "bthd" (q[B,T,H,D],
//                      k[B,S,H,D], v[B,S,H,Dv], out[B,T,H,Dv]: heads as a
//                      Linear writes them) or "packed" (qkv[B,T,3,H,D] as one
//                      fused projection writes them, out[B,T,H,D])
//   attention_bwd  in: q, k, v (or qkv), out, lse, dout[, mask]
//                  out: dq, dk, dv (or dqkv), in the layout of the inputs
//
// Only out and lse outlive the forward; the backward recomputes the
// probabilities block by block from q, k and lse. The lse output carries no
// gradient: a graph whose loss depends on it is refused.
#include <cmath>

#include "ops/common/op_common.hpp"

namespace memfit {
namespace {

struct Dims {
  int64_t B, H, T, S, D, Dv;
};

bool packed(const Node& n) { return n.attrs.has("layout") && n.attrs.s("layout") == "packed"; }
size_t qkv_inputs(const Node& n) { return packed(n) ? 1 : 3; }

// Checks the layout, q, k, v (or qkv) and the optional mask that follows
// `extra` more inputs (out, lse, dout in the backward).
Dims check_qkv(const Graph& g, const Node& n, size_t extra) {
  const std::string layout = n.attrs.has("layout") ? n.attrs.s("layout") : "bhtd";
  if (layout != "bhtd" && layout != "bthd" && layout != "packed")
    shape_fail(g, n, "attention layout must be bhtd, bthd or packed, got '" + layout + "'");
  const size_t nq = qkv_inputs(n), mask_at = nq + extra;
  if (n.inputs.size() != mask_at && n.inputs.size() != mask_at + 1)
    shape_fail(g, n, std::string(nq == 1 ? "attention (packed) takes qkv" : "attention takes q, k, v") +
                         (extra ? ", out, lse, dout" : "") + " and an optional mask");
  for (size_t i = 0; i < nq; ++i) expect_rank(g, n, i, nq == 1 ? 5 : 4);
  const DType t = in_dtype(g, n, 0);
  for (size_t i = 0; i < nq; ++i)
    if (!is_float(in_dtype(g, n, i)) || in_dtype(g, n, i) != t) shape_fail(g, n, "attention needs q, k, v of one float type");
  Dims d{};
  if (nq == 1) {
    const Shape& x = in_shape(g, n, 0);
    if (x[2] != 3) shape_fail(g, n, "packed attention needs qkv [B, T, 3, H, D], got " + shape_str(x));
    d = {x[0], x[3], x[1], x[1], x[4], x[4]};
  } else {
    const Shape &q = in_shape(g, n, 0), &k = in_shape(g, n, 1), &v = in_shape(g, n, 2);
    // Axis of heads and of rows (time) in this layout.
    const size_t ah = layout == "bhtd" ? 1 : 2, at = layout == "bhtd" ? 2 : 1;
    const std::string lq = layout == "bhtd" ? "[B, H, T, D]" : "[B, T, H, D]";
    if (k[0] != q[0] || k[ah] != q[ah] || k[3] != q[3])
      shape_fail(g, n, "attention needs k " + std::string(layout == "bhtd" ? "[B, H, S, D]" : "[B, S, H, D]") +
                           " matching q " + lq);
    if (v[0] != q[0] || v[ah] != q[ah] || v[at] != k[at])
      shape_fail(g, n, "attention needs v " + std::string(layout == "bhtd" ? "[B, H, S, Dv]" : "[B, S, H, Dv]") +
                           " matching k");
    d = {q[0], q[ah], q[at], k[at], q[3], v[3]};
  }
  for (int64_t e : {d.B, d.H, d.T, d.S, d.D, d.Dv})
    if (e < 1) shape_fail(g, n, "attention needs non-empty q, k, v");
  if (n.inputs.size() > mask_at) {
    const Shape& m = in_shape(g, n, mask_at);
    if (in_dtype(g, n, mask_at) != DType::i32 || m != Shape{d.B, d.S})
      shape_fail(g, n, "attention's key mask must be i32 [B, S]");
  }
  const double p = n.attrs.f("dropout", 0.0);
  if (!(p >= 0.0 && p < 1.0)) shape_fail(g, n, "attention dropout must be in [0, 1)");
  if (n.attrs.has("scale") && !std::isfinite(n.attrs.f("scale"))) shape_fail(g, n, "attention scale must be finite");
  return d;
}

// The shape of out (and dout) in the node's layout.
Shape out_shape(const Node& n, const Dims& d) {
  const bool bhtd = !n.attrs.has("layout") || n.attrs.s("layout") == "bhtd";
  return bhtd ? Shape{d.B, d.H, d.T, d.Dv} : Shape{d.B, d.T, d.H, d.Dv};
}

// Multiply-adds x2 of the two products (q k^T and p v), about half of them
// under the causal mask when T ~ S.
double attention_flops(const Graph& g, const Node& n, double products, size_t extra) {
  const Dims d = check_qkv(g, n, extra);
  const double rows = static_cast<double>(d.B * d.H * d.T) * static_cast<double>(d.S);
  double f = products * rows * static_cast<double>(d.D + d.Dv) + 10.0 * rows;  // + exp per score
  if (n.attrs.i("causal", 0)) f *= 0.5;
  return f;
}

}  // namespace

void register_attention_ops() {
  OpDef a;
  a.name = "attention";
  a.infer = [](const Graph& g, const Node& n) {
    const Dims d = check_qkv(g, n, 0);
    return std::vector<ValueMeta>{{out_shape(n, d), in_dtype(g, n, 0)}, {{d.B, d.H, d.T}, DType::f32}};
  };
  a.traits.heavy = true;
  a.grad = [](GradContext& c) {
    const Node& f = c.fwd();
    const size_t nq = qkv_inputs(f);
    std::vector<ValueId> r(f.inputs.size(), kNone);
    if (c.out_grads.size() > 1 && c.out_grads[1] != kNone)
      shape_fail(c.g, f, "attention's lse output has no gradient; the loss must not depend on it");
    bool any = false;
    for (size_t i = 0; i < nq; ++i) any = any || c.need[i];
    if (c.out_grads[0] == kNone || !any) return r;
    std::vector<ValueId> ins(f.inputs.begin(), f.inputs.begin() + static_cast<std::ptrdiff_t>(nq));
    for (ValueId v : {c.out(0), c.out(1), c.out_grads[0]}) ins.push_back(v);
    if (f.inputs.size() > nq) ins.push_back(c.in(nq));
    const auto g = c.emit("attention_bwd", std::move(ins), f.attrs);
    for (size_t i = 0; i < nq; ++i)
      if (c.need[i]) r[i] = g[i];
    return r;
  };
  // q k^T (T S D multiply-adds) and P v (T S Dv), x2: 4 T S D per (b, h) when Dv = D.
  a.flops = [](const Graph& g, const Node& n) { return attention_flops(g, n, 2.0, 0); };
  register_op(a);

  OpDef b;
  b.name = "attention_bwd";
  b.traits.no_gradient = true;
  b.traits.heavy = true;
  b.infer = [](const Graph& g, const Node& n) {
    const Dims d = check_qkv(g, n, 3);
    const size_t nq = qkv_inputs(n);
    const Shape o = out_shape(n, d);
    if (in_shape(g, n, nq) != o || in_shape(g, n, nq + 2) != o || in_dtype(g, n, nq) != in_dtype(g, n, 0) ||
        in_dtype(g, n, nq + 2) != in_dtype(g, n, 0))
      shape_fail(g, n, "attention_bwd needs out and dout " + shape_str(o) + " of q's type");
    if (in_shape(g, n, nq + 1) != Shape{d.B, d.H, d.T} || in_dtype(g, n, nq + 1) != DType::f32)
      shape_fail(g, n, "attention_bwd needs lse f32 [B, H, T]");
    std::vector<ValueMeta> r;
    for (size_t i = 0; i < nq; ++i) r.push_back(same_as(g, n, i)[0]);
    return r;
  };
  // Recomputes q k^T, then dout v^T, dv, dq and dk: five products (~2.5x the forward).
  b.flops = [](const Graph& g, const Node& n) { return attention_flops(g, n, 5.0, 3); };
  register_op(b);
}

}  // namespace memfit
