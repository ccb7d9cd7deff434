// lstm: one LSTM layer over a batch-first sequence, PyTorch nn.LSTM's
// semantics (gate order i, f, g, o; h0 = c0 = 0), with optional per-sample
// lengths (a packed sequence: the state stops at each sample's last step and
// y is 0 after it). Its backward lstm_bwd runs back through time.
// N batch, T time steps, I input features, H hidden features, G = 4H.
//
// lstm(x[N,T,I], w_ih[G,I], w_hh[G,H], b_ih[G], b_hh[G], [lengths[N] i32])
//   -> y[N,T,H], h_last[N,H], c_last[N,H] (x's type),
//      gates[T,N,G], cells[T,N,H] (f32: the activated gates and the cell
//      states, what the backward reads; planned like any output).
// lstm_bwd(x, w_ih, w_hh, y, gates, cells, [lengths], [dy], [dh_last],
//          [dc_last]; attrs lengths, dy, dh, dc: 1 where present)
//   -> dx[N,T,I], dw_ih, dw_hh, db_ih, db_hh (f32), assigned.
// The exact arithmetic is in ops/lstm/params.hpp.
#include "ops/common/op_recurrent.hpp"

namespace memfit {
namespace {

void need(const Graph& g, const Node& n, size_t i, const Shape& s, const char* what) {
  if (in_shape(g, n, i) != s || !is_float(in_dtype(g, n, i)))
    shape_fail(g, n, std::string(what) + " must be a float " + shape_str(s) + " tensor, got " + shape_str(in_shape(g, n, i)));
}

std::vector<ValueMeta> infer_lstm(const Graph& g, const Node& n) {
  if (n.inputs.size() != 5 && n.inputs.size() != 6)
    shape_fail(g, n, "lstm takes x, w_ih, w_hh, b_ih, b_hh and optionally lengths");
  const Shape& x = in_shape(g, n, 0);
  if (x.size() != 3 || !is_float(in_dtype(g, n, 0))) shape_fail(g, n, "x must be a float [N, T, I] tensor (batch first)");
  const Shape& whh = in_shape(g, n, 2);
  if (whh.size() != 2 || whh[0] != 4 * whh[1] || whh[1] < 1)
    shape_fail(g, n, "w_hh must be [4H, H], got " + shape_str(whh));
  const int64_t N = x[0], T = x[1], I = x[2], H = whh[1];
  need(g, n, 1, {4 * H, I}, "w_ih");
  need(g, n, 3, {4 * H}, "b_ih");
  need(g, n, 4, {4 * H}, "b_hh");
  if (n.inputs.size() == 6 && (in_shape(g, n, 5) != Shape{N} || in_dtype(g, n, 5) != DType::i32))
    shape_fail(g, n, "lengths must be i32 [" + std::to_string(N) + "], got " + dtype_name(in_dtype(g, n, 5)) + " " +
                         shape_str(in_shape(g, n, 5)));
  const DType dt = in_dtype(g, n, 0);
  return {{{N, T, H}, dt}, {{N, H}, dt}, {{N, H}, dt}, {{T, N, 4 * H}, DType::f32}, {{T, N, H}, DType::f32}};
}

std::vector<ValueMeta> infer_lstm_bwd(const Graph& g, const Node& n) {
  const bool L = n.attrs.i("lengths", 0) != 0, dy = n.attrs.i("dy", 0) != 0, dh = n.attrs.i("dh", 0) != 0,
             dc = n.attrs.i("dc", 0) != 0;
  if (n.inputs.size() != size_t(6 + L + dy + dh + dc)) shape_fail(g, n, "lstm_bwd's inputs do not match its attributes");
  const Shape& x = in_shape(g, n, 0);
  const Shape& whh = in_shape(g, n, 2);
  if (x.size() != 3 || whh.size() != 2 || whh[0] != 4 * whh[1]) shape_fail(g, n, "lstm_bwd needs x [N,T,I] and w_hh [4H,H]");
  const int64_t N = x[0], T = x[1], I = x[2], H = whh[1];
  need(g, n, 1, {4 * H, I}, "w_ih");
  need(g, n, 3, {N, T, H}, "y");
  need(g, n, 4, {T, N, 4 * H}, "gates");
  need(g, n, 5, {T, N, H}, "cells");
  size_t k = 6;
  if (L && (in_shape(g, n, k++) != Shape{N})) shape_fail(g, n, "lengths must be [N]");
  if (dy) need(g, n, k++, {N, T, H}, "dy");
  if (dh) need(g, n, k++, {N, H}, "dh_last");
  if (dc) need(g, n, k++, {N, H}, "dc_last");
  return {same_as(g, n, 0)[0], {{4 * H, I}, DType::f32}, {{4 * H, H}, DType::f32}, {{4 * H}, DType::f32},
          {{4 * H}, DType::f32}};
}

std::vector<ValueId> grad_lstm(GradContext& c) {
  const size_t nin = c.fwd().inputs.size();
  std::vector<ValueId> r(nin, kNone);  // lengths (integers): no gradient
  bool any = false;
  for (size_t i = 0; i < 5; ++i) any = any || c.need[i];
  const ValueId dy = c.out_grads[0], dh = c.out_grads[1], dc = c.out_grads[2];
  if (!any || (dy == kNone && dh == kNone && dc == kNone)) return r;
  std::vector<ValueId> ins{c.in(0), c.in(1), c.in(2), c.out(0), c.out(3), c.out(4)};
  const bool L = nin == 6;
  if (L) ins.push_back(c.in(5));
  for (ValueId v : {dy, dh, dc})
    if (v != kNone) ins.push_back(v);
  Attrs a{{"lengths", int64_t(L)}, {"dy", int64_t(dy != kNone)}, {"dh", int64_t(dh != kNone)}, {"dc", int64_t(dc != kNone)}};
  auto outs = c.emit("lstm_bwd", ins, a);
  for (size_t i = 0; i < 5; ++i) r[i] = c.need[i] ? outs[i] : kNone;
  return r;
}

}  // namespace

void register_lstm_ops() { register_recurrent_ops("lstm", infer_lstm, grad_lstm, infer_lstm_bwd); }

}  // namespace memfit
