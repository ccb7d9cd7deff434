// The patterns models/onnx/patterns.cpp finds (GELU, SiLU, transposed
// products, attention, stochastic depth), emitted as memfit's fused ops
// (models/onnx/convert.hpp).
#include <algorithm>
#include <cmath>
#include <limits>

#include "models/onnx/convert.hpp"

namespace memfit::models::onnx_import {
namespace {

// Whether a mask constant c of attention node n (its name `name`) is causal
// for T queries and S keys, `hidden` telling which of its elements hide a
// key: c broadcasts over the [.., T, S] scores, alike for every batch row
// and head, hiding key j from query i exactly where j > i + S - T. Returns
// false for a mask that hides nothing; refuses any other mask.
template <class Hidden>
bool causal_from(Env& e, const onnx::NodeProto& n, const std::string& name, int64_t T, int64_t S, Hidden hidden) {
  if (!foldable(e, name))
    refuse(e.f, n, "the attention mask '" + name + "' is computed by the graph: memfit takes a mask known when the "
                   "model is read (a causal buffer such as torch.tril(ones), or the module called without "
                   "attention_mask)");
  const Const& c = e.consts.count(name) ? e.consts.at(name) : e.f.initializers.at(name);
  const Shape d = const_dims(c);
  const int64_t rows = d.size() >= 2 ? d[d.size() - 2] : 1, cols = d.empty() ? 1 : d.back();
  if ((rows != 1 && rows != T) || (cols != 1 && cols != S))
    refuse(e.f, n, "the attention mask is " + shape_str(d) + ", which does not broadcast over the [T, S] = [" +
                   std::to_string(T) + ", " + std::to_string(S) + "] scores");
  bool any = false, causal = true;
  const int64_t per = rows * cols;
  for (int64_t k = 0; k < c.size(); ++k) {
    const bool h = hidden(c, k);
    const int64_t i = rows == 1 ? -1 : (k % per) / cols, j = cols == 1 ? -1 : k % cols;
    any = any || h;
    causal = causal && i >= 0 && j >= 0 && h == (j > i + S - T);
  }
  if (any && !causal)
    refuse(e.f, n, "the attention mask hides keys in a pattern other than the causal one (key j hidden from query i "
                   "exactly where j > i; a padding mask?): memfit's attention takes a causal mask or none");
  return any;
}

// A Where(cond, -inf, scores) mask hides where cond is set or, inverted
// (Where(cond, scores, -inf)), where it is clear.
auto where_hidden(bool inverted) {
  return [inverted](const Const& c, int64_t k) { return (const_at(c, k) != 0) != inverted; };
}

// An additive mask, scores + mask: 0 where a key is seen, a large negative
// (at most -1e4, or -inf) where it is hidden; Hugging Face's (1 - mask) *
// min of the all-ones mask a module called without attention_mask makes is
// all 0, no mask. Any other value (a bias such as ALiBi) is refused.
auto additive_hidden(Env& e, const onnx::NodeProto& add) {
  return [&e, &add](const Const& c, int64_t k) {
    const double v = const_at(c, k);
    if (v > -1e4 && v != 0)
      refuse(e.f, add, "the attention mask adds " + std::to_string(v) + " to a score: memfit's attention takes a "
                       "causal or padding mask (0 for a seen key, a large negative for a hidden one)");
    return v <= -1e4;
  };
}

// A mask computed from the attention_mask input (tainted): hidden exactly
// where the probe is 0 at the element's batch row and key, for every head
// and query, over [B, ..., S] scores. Refuses anything else.
template <class Hidden>
void check_padding_mask(Env& e, const onnx::NodeProto& n, const std::string& name, int64_t S, Hidden hidden) {
  const Const& c = e.consts.at(name);
  const Shape d = const_dims(c);
  const int64_t T = e.b.g.value(e.mask_value).shape[1];
  const auto B = static_cast<int64_t>(e.mask_probe.size()) / T;
  if (d.size() < 2 || d[0] != B || d.back() != S || S != T)
    refuse(e.f, n, "the attention mask made from attention_mask is " + shape_str(d) + ": memfit takes a padding mask "
                   "[B, 1, 1, S] (or broadcast over heads and queries) of B = " + std::to_string(B) + " rows and S = " +
                   std::to_string(T) + " keys");
  const int64_t per_row = c.size() / d[0];
  for (int64_t k = 0; k < c.size(); ++k) {
    const int64_t b = k / per_row, j = k % S;
    if (hidden(c, k) != (e.mask_probe[static_cast<size_t>(b * T + j)] == 0))
      refuse(e.f, n, "the attention mask made from attention_mask is not a padding mask (key j of row b hidden "
                     "exactly where attention_mask[b, j] is 0): memfit's attention takes that, a causal mask, or none");
  }
}

}  // namespace

// Stochastic depth's noise (StochasticDepthMatch): dropout of ones.
void emit_stochastic_depth(Env& e, const onnx::NodeProto& n, const StochasticDepthMatch& m) {
  const onnx::NodeProto& u = e.f.graph.node(m.uniform);
  const Shape dims = const_dims(constant(e, u, 0));
  if (dims.empty() || dims[0] != e.batch)
    refuse(e.f, u, "draws noise of shape " + shape_str(dims) + ": memfit's stochastic depth draws one number per sample");
  folded_count(e, u, dims);
  const ValueId ones = e.b.g.add1("fill", {}, {{"shape", dims}, {"value", 1.0}}, layer_of(e, u) + ".ones");
  bind(e, n, dropout(e.b, ones, 1.0 - m.survival, module_path(u.name()).empty() ? u.name() : module_path(u.name())));
}

// ---------------------------------------------------------------- patterns ----

void emit_gelu(Env& e, const onnx::NodeProto& n, const GeluMatch& m) {
  auto it = e.values.find(m.x);
  if (it == e.values.end()) refuse(e.f, n, "the GELU's input '" + m.x + "' is not a tensor of the graph");
  bind(e, n, gelu(e.b, it->second, m.tanh));
}

void emit_silu(Env& e, const onnx::NodeProto& n, const SiluMatch& m) {
  auto it = e.values.find(m.x);
  if (it == e.values.end()) refuse(e.f, n, "the SiLU's input '" + m.x + "' is not a tensor of the graph");
  bind(e, n, activation(e.b, it->second, "silu"));
}

void emit_matmul(Env& e, const onnx::NodeProto& n, const MatMulMatch& m) {
  const onnx::NodeProto& mm = e.f.graph.node(m.matmul);
  const ValueId a = value_named(e, mm, m.a), w = value_named(e, mm, m.b);
  const ValueId bias = m.bias.empty() ? kNone : value_named(e, n, m.bias);
  const std::string layer = layer_of(e, mm);
  const Shape ws = shape_of(e, w);
  if (m.trans_b && !m.trans_a && ws.size() == 2 && (bias == kNone || shape_of(e, bias) == Shape{ws[0]})) {
    // x W^T (+ b): nn.Linear, W [out, in] as stored.
    std::vector<ValueId> ins{a, w};
    if (bias != kNone) ins.push_back(bias);
    return bind(e, n, e.b.g.add1("linear", ins, {}, layer));
  }
  const ValueId y = e.b.g.add1("matmul", {a, w}, {{"trans_a", int64_t(m.trans_a)}, {"trans_b", int64_t(m.trans_b)}}, layer);
  bind(e, n, bias == kNone ? y : add_broadcast(e.b, y, bias));
}

// The shape of an attention's scores, [B, H, T, S], from its q and k (for
// a Shape node that reads them; the match never makes the scores).
Shape scores_shape(Env& e, const onnx::NodeProto& n, const AttentionMatch& m) {
  if (!m.qkv.empty()) refuse(e.f, n, "reads the shape of packed attention scores, which memfit does not make");
  const auto& nodes = e.f.graph.node();
  const Shape q = shape_of(e, value_named(e, nodes[m.qk], m.q)), k = shape_of(e, value_named(e, nodes[m.qk], m.k));
  if (q.size() != 4 || k.size() != 4) refuse(e.f, n, "reads the shape of attention scores whose q or k is not 4-d");
  if (m.bthd) return {q[0], q[2], q[1], k[1]};
  return {q[0], q[1], q[2], k[m.k_transposed ? 2 : 3]};
}

// The packed attention's input: the Split's [B, T, 3C] input as qkv [B, T,
// 3, H, D], H and D from q's Reshape to [B, T, H, D]; kNone where the
// Split or the Reshape is not that (the heads are then sliced apart).
ValueId packed_qkv(Env& e, const AttentionMatch& m) {
  const auto& nodes = e.f.graph.node();
  const onnx::NodeProto &split = nodes[m.split], &rq = nodes[m.reshape_q];
  const ValueId x = value_named(e, split, m.qkv);
  const Shape xs = shape_of(e, x);
  if (xs.size() != 3 || xs[2] % 3 || axis_in(e, split, attr_i(split, "axis", 0), 3) != 2) return kNone;
  const int64_t C = xs[2] / 3;
  Shape sizes = has_input(split, 1) ? const_ints(e, split, 1) : attr_ints(split, "split", {});
  if (!sizes.empty() && sizes != Shape{C, C, C}) return kNone;
  Shape to = const_ints(e, rq, 1);
  if (to.size() != 4) return kNone;
  if (to[2] == -1 && to[3] > 0 && C % to[3] == 0) to[2] = C / to[3];
  if (to[3] == -1 && to[2] > 0 && C % to[2] == 0) to[3] = C / to[2];
  if (to[2] < 1 || to[3] < 1 || to[2] * to[3] != C) return kNone;
  return reshape(e.b, x, {xs[0], xs[1], 3, to[2], to[3]});
}

// The heads sliced from the Split's input, as the skipped Split and
// Reshapes would have made them (a packed match whose shapes did not fit).
void unpack_heads(Env& e, const AttentionMatch& m) {
  const auto& nodes = e.f.graph.node();
  const onnx::NodeProto& split = nodes[m.split];
  op_split(e, split);
  for (const char* part : {"q", "k", "v"}) {
    const std::string& name = part[0] == 'q' ? m.q : part[0] == 'k' ? m.k : m.v;
    for (const auto& r : nodes)
      if (r.output_size() > 0 && r.output(0) == name) op_reshape(e, r);
  }
}

void emit_attention(Env& e, const onnx::NodeProto& n, const AttentionMatch& m) {
  const auto& nodes = e.f.graph.node();
  const onnx::NodeProto& qk = nodes[m.qk];
  ValueId qkv = kNone;
  if (!m.qkv.empty()) {
    qkv = packed_qkv(e, m);
    if (qkv == kNone) unpack_heads(e, m);
  }
  if (qkv != kNone) {
    const Shape s = shape_of(e, qkv);  // [B, T, 3, H, D]
    AttentionOpts o = attention_opts(e, m, s[1], s[1]);
    o.name = layer_of(e, qk);
    return bind(e, n, attention_packed(e.b, qkv, o));
  }
  const ValueId q = value_named(e, qk, m.q), v = value_named(e, nodes[m.av], m.v);
  ValueId k = value_named(e, qk, m.k);
  const Shape qs = shape_of(e, q);
  if (qs.size() != 4 || shape_of(e, k).size() != 4 || shape_of(e, v).size() != 4)
    refuse(e.f, qk, "memfit's attention takes 4-d q, k, v ([B, H, T, D]), got " + shape_str(qs) + ", " +
                        shape_str(shape_of(e, k)) + ", " + shape_str(shape_of(e, v)));
  if (!m.bthd && !m.k_transposed) k = permute(e.b, k, {0, 1, 3, 2});  // kT -> k
  const int64_t T = qs[m.bthd ? 1 : 2], S = shape_of(e, k)[m.bthd ? 1 : 2];
  AttentionOpts o = attention_opts(e, m, T, S);
  o.layout = m.bthd ? "bthd" : "bhtd";
  o.name = layer_of(e, qk);
  bind(e, n, attention(e.b, q, k, v, o));
}

// The scale, the causal flag (from the mask's constant) and the dropout of
// an attention match, for T queries and S keys.
AttentionOpts attention_opts(Env& e, const AttentionMatch& m, int64_t T, int64_t S) {
  const auto& nodes = e.f.graph.node();
  AttentionOpts o;
  o.scale = 1.0;
  if (m.scale >= 0) {
    const onnx::NodeProto& sc = nodes[m.scale];
    const int c = is_const(e, sc.input(1)) ? 1 : 0;
    const double s = const_scalar(e, sc, c);
    if (sc.op_type() == "Div" && s == 0) refuse(e.f, sc, "divides by zero");
    o.scale = sc.op_type() == "Div" ? 1.0 / s : s;
    if (!(o.scale > 0)) refuse(e.f, sc, "scales the attention scores by " + std::to_string(o.scale) + ": memfit's attention takes a positive scale");
  }
  if (m.mask >= 0) {
    const onnx::NodeProto& w = nodes[m.mask];
    const std::string& name = m.mask_add.empty() ? w.input(0) : m.mask_add;
    if (e.tainted.count(name)) {
      if (m.mask_add.empty()) check_padding_mask(e, w, name, S, where_hidden(m.mask_inverted));
      else check_padding_mask(e, w, name, S, additive_hidden(e, w));
      o.mask = e.mask_value;
    } else {
      o.causal = m.mask_add.empty() ? causal_from(e, w, name, T, S, where_hidden(m.mask_inverted))
                                    : causal_from(e, w, name, T, S, additive_hidden(e, w));
    }
  }
  if (m.dropout >= 0) {
    const onnx::NodeProto& d = nodes[m.dropout];
    const double p = has_input(d, 1) ? const_scalar(e, d, 1) : attr_f(d, "ratio", 0.5);
    const bool train = has_input(d, 2) ? const_scalar(e, d, 2) != 0 : false;
    if (!(p >= 0 && p < 1)) refuse(e.f, d, "ratio " + std::to_string(p) + " is outside [0, 1)");
    if (train && e.b.training) o.dropout = p;
  }
  const onnx::NodeProto& sm = nodes[m.softmax];
  const int64_t axis = attr_i(sm, "axis", e.f.opset >= 13 ? -1 : 1);
  if (axis != -1 && axis != 3) refuse(e.f, sm, "softmax over axis " + std::to_string(axis) + " of the attention scores: memfit's attention normalises over the keys (the last axis)");
  return o;
}

}  // namespace memfit::models::onnx_import
