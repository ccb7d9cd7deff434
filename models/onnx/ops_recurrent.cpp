// ONNX recurrent layers as memfit ops (models/onnx/convert.hpp).
#include <algorithm>
#include <cmath>
#include <limits>

#include "models/onnx/convert.hpp"

namespace memfit::models::onnx_import {

// ------------------------------------------------------- recurrent layers ----
//
// ONNX's RNN, GRU and LSTM nodes (one layer, forward, zero initial state) as
// memfit's rnn and lstm ops, which are PyTorch's nn.RNN, nn.GRU and nn.LSTM,
// batch first, h0 = c0 = 0. ONNX holds one direction's weights as W [1, G,
// I], R [1, G, H] and B [1, 2G] (W's biases, then R's), G = k H, in its own
// gate order: LSTM i, o, f, c where memfit (and PyTorch) has i, f, g, o; GRU
// z, r, h where it has r, z, n. torch's exporter writes W, R and B from the
// module's parameters with Slice and Concat nodes of the graph, so the
// parameters stay the state_dict's tensors (saved back under their names);
// here the gate rows are put back in memfit's order by slices and a concat
// of those values, graph ops too, through which the gradients reach the
// same parameters. An initializer W, R or B (another exporter) becomes a
// parameter in ONNX's own layout and name, reordered the same way.

// v [k H, ...] with its blocks of H rows in the order `blocks` (the ONNX
// block of each of memfit's gates); runs of consecutive blocks are one slice.
ValueId gate_rows(Env& e, ValueId v, int64_t H, const std::vector<int64_t>& blocks) {
  std::vector<ValueId> parts;
  for (size_t k = 0; k < blocks.size();) {
    size_t run = 1;
    while (k + run < blocks.size() && blocks[k + run] == blocks[k] + static_cast<int64_t>(run)) ++run;
    const int64_t rows = static_cast<int64_t>(run) * H;
    parts.push_back(rows == shape_of(e, v)[0] ? v : slice(e.b, v, 0, blocks[k] * H, rows));
    k += run;
  }
  return parts.size() == 1 ? parts[0] : concat(e.b, parts, 0);
}

// The integers of `name` for node n: an import-time constant, or the value
// of a Constant node that comes later in the file (not converted yet).
std::vector<int64_t> ints_ahead(Env& e, const onnx::NodeProto& n, const std::string& name) {
  if (is_const(e, name)) {
    const Const& c = e.consts.count(name) ? e.consts.at(name) : e.f.initializers.at(name);
    if (!c.is_float) return c.i;
  }
  for (const auto& k : e.f.graph.node())
    if (k.op_type() == "Constant" && k.output_size() == 1 && k.output(0) == name)
      if (const auto* a = attr(k, "value")) {
        const Const c = read_tensor(e.f, a->t(), "node '" + k.name() + "''s value");
        if (!c.is_float) return c.i;
      }
  refuse(e.f, n, "reads '" + name + "' as constant integers, which it is not");
}

// Input k, an initial state: absent, or a constant of zeros.
void zero_state(Env& e, const onnx::NodeProto& n, int k, const std::string& what) {
  if (!has_input(n, k)) return;
  if (!is_const(e, n.input(k)))
    refuse(e.f, n, "its " + what + " ('" + n.input(k) + "') is computed by the graph: memfit's recurrent layers start "
                   "from a zero state (the module called without an initial state)");
  const Const& c = constant(e, n, k);
  bool zero = true;
  for (int64_t i = 0; i < c.size(); ++i) zero = zero && (c.is_float ? (*c.f)[static_cast<size_t>(i)] == 0.0f : c.i[static_cast<size_t>(i)] == 0);
  if (!zero) refuse(e.f, n, "its " + what + " ('" + n.input(k) + "') is not zero: memfit's recurrent layers start from a zero state");
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return "[" + s + "]";
}

void emit_recurrent(Env& e, const onnx::NodeProto& n, const RecurrentMatch& m) {
  const std::string& op = n.op_type();
  const bool lstm = op == "LSTM", gru = op == "GRU";
  const int64_t k = lstm ? 4 : gru ? 3 : 1;
  const std::string dir = attr_s(n, "direction", "forward");
  if (dir != "forward")
    refuse(e.f, n, "attribute direction=" + dir + ": memfit imports forward layers only (a module with "
                   "bidirectional=False; num_layers > 1 exports one node per layer)");
  if (attr_i(n, "layout", 0) != 0) refuse(e.f, n, "attribute layout=" + std::to_string(attr_i(n, "layout", 0)) + ": memfit imports layout 0 (X as [T, N, I], as torch exports)");
  if (attr(n, "clip")) refuse(e.f, n, "attribute clip: memfit's recurrent cells do not clip their gates");
  if (attr(n, "activation_alpha") || attr(n, "activation_beta"))
    refuse(e.f, n, "attributes activation_alpha/activation_beta: memfit's recurrent cells take the default activations");
  if (lstm && attr_i(n, "input_forget", 0) != 0) refuse(e.f, n, "attribute input_forget=1 (coupled input and forget gates) is not supported");
  if (gru && attr_i(n, "linear_before_reset", 0) != 1)
    refuse(e.f, n, "attribute linear_before_reset=0: memfit's GRU is PyTorch's, which applies the reset gate to the "
                   "recurrent product (linear_before_reset=1, as torch exports nn.GRU)");
  std::string cell = gru ? "gru" : "tanh";
  if (const auto* a = attr(n, "activations")) {
    const std::vector<std::string> acts(a->strings().begin(), a->strings().end());
    const std::vector<std::string> want = lstm ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
                                               : std::vector<std::string>{"Sigmoid", "Tanh"};
    if (!lstm && !gru && acts == std::vector<std::string>{"Relu"}) cell = "relu";
    else if (!lstm && !gru && acts != std::vector<std::string>{"Tanh"})
      refuse(e.f, n, "attribute activations " + joined(acts) + ": memfit's RNN takes [Tanh] or [Relu]");
    else if ((lstm || gru) && acts != want)
      refuse(e.f, n, "attribute activations " + joined(acts) + ": memfit's " + op + " takes " + joined(want));
  }
  if (has_input(n, 4))
    refuse(e.f, n, "has sequence_lens ('" + n.input(4) + "'): memfit's " + op + " runs every sequence to its full length");
  if (lstm && has_input(n, 7)) refuse(e.f, n, "has peephole weights P ('" + n.input(7) + "'): memfit's LSTM has none");
  if (!has_input(n, 3)) refuse(e.f, n, "has no bias B (a layer made with bias=False): memfit's recurrent layers have biases");
  zero_state(e, n, 5, "initial_h");
  if (lstm) zero_state(e, n, 6, "initial_c");

  const bool batch_first = !m.x.empty();
  ValueId x = batch_first ? value_named(e, n, m.x) : value(e, n, 0);
  const Shape xs = shape_of(e, x);
  if (xs.size() != 3) refuse(e.f, n, "its X is " + shape_str(xs) + ", not [T, N, I]");
  const int64_t T = xs[batch_first ? 1 : 0], N = xs[batch_first ? 0 : 1], I = xs[2];
  if (!batch_first) x = permute(e.b, x, {1, 0, 2});
  const int64_t H = attr_i(n, "hidden_size", 0);
  auto want = [&](ValueId v, const std::string& what, const Shape& s) {
    if (shape_of(e, v) != s)
      refuse(e.f, n, "its " + what + " is " + shape_str(shape_of(e, v)) + ", not " + shape_str(s) +
                     " (one direction, hidden_size " + std::to_string(H) + ", " + std::to_string(I) + " input features)");
  };
  if (H < 1) refuse(e.f, n, "has no hidden_size");
  std::vector<ValueId> ins{x};
  if (!m.w_ih.empty()) {  // the parameters themselves: the exporter's reordering undoes memfit's
    const std::vector<std::pair<const std::string*, Shape>> ps{
        {&m.w_ih, {k * H, I}}, {&m.w_hh, {k * H, H}}, {&m.b_ih, {k * H}}, {&m.b_hh, {k * H}}};
    for (const auto& [name, s] : ps) {
      ins.push_back(value_named(e, n, *name));
      want(ins.back(), "W, R or B's parameter '" + *name + "'", s);
    }
  } else {
    const ValueId W = value(e, n, 1), R = value(e, n, 2), B = value(e, n, 3);
    want(W, "W", {1, k * H, I});
    want(R, "R", {1, k * H, H});
    want(B, "B", {1, 2 * k * H});
    const std::vector<int64_t> order = lstm ? std::vector<int64_t>{0, 2, 3, 1} : gru ? std::vector<int64_t>{1, 0, 2} : std::vector<int64_t>{0};
    const ValueId bflat = reshape(e.b, B, {2 * k * H});
    ins.push_back(gate_rows(e, reshape(e.b, W, {k * H, I}), H, order));
    ins.push_back(gate_rows(e, reshape(e.b, R, {k * H, H}), H, order));
    ins.push_back(gate_rows(e, slice(e.b, bflat, 0, 0, k * H), H, order));
    ins.push_back(gate_rows(e, slice(e.b, bflat, 0, k * H, k * H), H, order));
  }
  const std::vector<ValueId> outs = lstm ? e.b.g.add_node("lstm", ins, {}, layer_of(e, n))
                                         : e.b.g.add_node("rnn", ins, {{"cell", cell}}, layer_of(e, n));
  auto read = [&](int o) { return n.output_size() > o && !n.output(o).empty() && (!e.used || e.used->count(n.output(o))); };
  // Y [T, 1, N, H]; batch first [N, T, H] where its Squeeze and what reads it matched.
  bool y_done = false;
  if (m.squeeze >= 0) {
    const onnx::NodeProto& sq = e.f.graph.node(m.squeeze);
    const std::vector<int64_t> axes = has_input(sq, 1) ? ints_ahead(e, sq, sq.input(1)) : attr_ints(sq, "axes", {});
    if (axes == std::vector<int64_t>{1} || axes == std::vector<int64_t>{-3}) {
      for (int t : m.transposes) e.values[e.f.graph.node(t).output(0)] = outs[0];
      if (!m.chain.empty()) e.values[m.chain] = outs[0];
      y_done = true;
    }
  }
  if (!y_done && (read(0) || m.squeeze >= 0)) bind(e, n, reshape(e.b, permute(e.b, outs[0], {1, 0, 2}), {T, 1, N, H}), 0);
  if (!y_done && m.squeeze >= 0) {  // Squeeze of other axes: converted as they are
    const onnx::NodeProto& sq = e.f.graph.node(m.squeeze);
    op_squeeze(e, sq);
    for (int t : m.transposes) op_transpose(e, e.f.graph.node(t));
    if (!m.chain.empty()) {  // the next layer reads it batch first
      const ValueId s = e.values.at(sq.output(0));
      if (shape_of(e, s).size() != 3) refuse(e.f, sq, "squeezes the layer's Y to " + shape_str(shape_of(e, s)) + ", not [T, N, H], for the next layer");
      e.values[m.chain] = permute(e.b, s, {1, 0, 2});
    }
  }
  if (read(1)) bind(e, n, reshape(e.b, outs[1], {1, N, H}), 1);
  if (lstm && read(2)) bind(e, n, reshape(e.b, outs[2], {1, N, H}), 2);
}

void op_recurrent(Env& e, const onnx::NodeProto& n) { emit_recurrent(e, n, RecurrentMatch{}); }

}  // namespace memfit::models::onnx_import
