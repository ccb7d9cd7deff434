// rnn: one recurrent layer over a batch-first sequence with PyTorch's
// semantics, h0 = 0: the Elman cell of nn.RNN (attribute cell "tanh" or
// "relu") or nn.GRU's cell (cell "gru", gate rows r, z, n). Its backward
// rnn_bwd runs back through time.
// N batch, T time steps, I input features, H hidden features, G gate rows
// (H, or 3H for the GRU).
//
// rnn(x[N,T,I], w_ih[G,I], w_hh[G,H], b_ih[G], b_hh[G]; cell)
//   -> y[N,T,H], h_last[N,H] (x's type), and for the GRU gates[T,N,4H]
//      (f32: r, z, n and the recurrent n term, what the backward reads;
//      planned like any output).
// rnn_bwd(x, w_ih, w_hh, y, [gates], [dy], [dh_last]; cell, dy, dh: 1 where
//         present) -> dx[N,T,I], dw_ih, dw_hh, db_ih, db_hh (f32), assigned.
// The exact arithmetic is in ops/rnn/params.hpp.
#include "ops/common/op_recurrent.hpp"

namespace memfit {
namespace {

void need(const Graph& g, const Node& n, size_t i, const Shape& s, const char* what) {
  if (in_shape(g, n, i) != s || !is_float(in_dtype(g, n, i)))
    shape_fail(g, n, std::string(what) + " must be a float " + shape_str(s) + " tensor, got " + shape_str(in_shape(g, n, i)));
}

// The gate rows per hidden feature of the node's cell (refusing an unknown one).
int64_t gates_per_h(const Graph& g, const Node& n) {
  const std::string c = n.attrs.has("cell") ? n.attrs.s("cell") : std::string();
  if (c == "tanh" || c == "relu") return 1;
  if (c == "gru") return 3;
  shape_fail(g, n, "cell must be tanh, relu or gru, got '" + c + "'");
}

// N, T, I, H of x and w_hh, checking w_ih and the shapes they share.
struct Dims {
  int64_t N, T, I, H, k;
};
Dims dims(const Graph& g, const Node& n) {
  const int64_t k = gates_per_h(g, n);
  const Shape& x = in_shape(g, n, 0);
  if (x.size() != 3 || !is_float(in_dtype(g, n, 0))) shape_fail(g, n, "x must be a float [N, T, I] tensor (batch first)");
  const Shape& whh = in_shape(g, n, 2);
  if (whh.size() != 2 || whh[0] != k * whh[1] || whh[1] < 1)
    shape_fail(g, n, "w_hh must be [" + std::string(k == 3 ? "3H" : "H") + ", H], got " + shape_str(whh));
  const Dims d{x[0], x[1], x[2], whh[1], k};
  need(g, n, 1, {k * d.H, d.I}, "w_ih");
  return d;
}

std::vector<ValueMeta> infer_rnn(const Graph& g, const Node& n) {
  if (n.inputs.size() != 5) shape_fail(g, n, "rnn takes x, w_ih, w_hh, b_ih and b_hh");
  const Dims d = dims(g, n);
  need(g, n, 3, {d.k * d.H}, "b_ih");
  need(g, n, 4, {d.k * d.H}, "b_hh");
  const DType dt = in_dtype(g, n, 0);
  std::vector<ValueMeta> r{{{d.N, d.T, d.H}, dt}, {{d.N, d.H}, dt}};
  if (d.k == 3) r.push_back({{d.T, d.N, 4 * d.H}, DType::f32});
  return r;
}

std::vector<ValueMeta> infer_rnn_bwd(const Graph& g, const Node& n) {
  const Dims d = dims(g, n);
  const bool gru = d.k == 3, dy = n.attrs.i("dy", 0) != 0, dh = n.attrs.i("dh", 0) != 0;
  if (n.inputs.size() != size_t(4 + gru + dy + dh)) shape_fail(g, n, "rnn_bwd's inputs do not match its attributes");
  need(g, n, 3, {d.N, d.T, d.H}, "y");
  size_t k = 4;
  if (gru) need(g, n, k++, {d.T, d.N, 4 * d.H}, "gates");
  if (dy) need(g, n, k++, {d.N, d.T, d.H}, "dy");
  if (dh) need(g, n, k++, {d.N, d.H}, "dh_last");
  const int64_t G = d.k * d.H;
  return {same_as(g, n, 0)[0], {{G, d.I}, DType::f32}, {{G, d.H}, DType::f32}, {{G}, DType::f32}, {{G}, DType::f32}};
}

std::vector<ValueId> grad_rnn(GradContext& c) {
  std::vector<ValueId> r(5, kNone);
  bool any = false;
  for (size_t i = 0; i < 5; ++i) any = any || c.need[i];
  const ValueId dy = c.out_grads[0], dh = c.out_grads[1];  // gates: saved values, no gradient flows
  if (!any || (dy == kNone && dh == kNone)) return r;
  const std::string cell = c.fwd().attrs.s("cell");
  std::vector<ValueId> ins{c.in(0), c.in(1), c.in(2), c.out(0)};
  if (cell == "gru") ins.push_back(c.out(2));
  for (ValueId v : {dy, dh})
    if (v != kNone) ins.push_back(v);
  Attrs a{{"cell", cell}, {"dy", int64_t(dy != kNone)}, {"dh", int64_t(dh != kNone)}};
  auto outs = c.emit("rnn_bwd", ins, a);
  for (size_t i = 0; i < 5; ++i) r[i] = c.need[i] ? outs[i] : kNone;
  return r;
}

}  // namespace

void register_rnn_ops() { register_recurrent_ops("rnn", infer_rnn, grad_rnn, infer_rnn_bwd); }

}  // namespace memfit
