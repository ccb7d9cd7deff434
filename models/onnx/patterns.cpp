// Patterns of several ONNX nodes that become one memfit op (import.hpp):
// the GELU torch writes out with Erf or Tanh, SiLU as x * Sigmoid(x), MatMuls whose operands come
// through Transposes (and nn.Linear's MatMul + bias Add), the Transposes around a
// recurrent layer (RNN, GRU, LSTM), and attention as
// torch exports it from q @ k.transpose(-2, -1). Found once, when the file is
// read: each match records its inputs by ONNX name, and its nodes are
// skipped when the graph is converted. A pattern matches only where each
// intermediate result is read by the pattern alone (and is no graph
// output), so skipping its nodes loses nothing; shapes and constant values
// are checked when the match is converted (convert.cpp and ops_*.cpp).
#include <algorithm>
#include <cmath>

#include "models/onnx/import.hpp"

namespace memfit::models::onnx_import {
namespace {

struct Index {
  const google::protobuf::RepeatedPtrField<onnx::NodeProto>& nodes;
  const std::map<std::string, double>& scalars;
  std::set<size_t>& fused;
  std::map<std::string, int> producer;
  std::map<std::string, std::vector<int>> readers;
  std::set<std::string> outputs;

  Index(const OnnxFile& f, const std::map<std::string, double>& s, std::set<size_t>& fu)
      : nodes(f.graph.node()), scalars(s), fused(fu) {
    for (int k = 0; k < nodes.size(); ++k) {
      for (const auto& o : nodes[k].output()) producer[o] = k;
      for (const auto& i : nodes[k].input()) readers[i].push_back(k);
    }
    for (const auto& o : f.graph.output()) outputs.insert(o.name());
  }
  const onnx::NodeProto& at(int k) const { return nodes[k]; }
  bool free(int k) const { return k >= 0 && !fused.count(static_cast<size_t>(k)); }
  // The node making v, if it is of this op and not taken by another pattern; else -1.
  int made_by(const std::string& v, const char* op) const {
    auto it = producer.find(v);
    return it != producer.end() && nodes[it->second].op_type() == op && free(it->second) ? it->second : -1;
  }
  // Whether v is read by exactly one node and is no graph output.
  bool single(const std::string& v) const {
    auto it = readers.find(v);
    return it != readers.end() && it->second.size() == 1 && !outputs.count(v);
  }
  // The only node reading v, if it is of this op; else -1.
  int only_reader(const std::string& v, const char* op) const {
    if (!single(v)) return -1;
    const int k = readers.at(v)[0];
    return nodes[k].op_type() == op && free(k) ? k : -1;
  }
  bool scalar_is(const std::string& name, double want, double rel = 1e-6) const {
    auto it = scalars.find(name);
    return it != scalars.end() && std::abs(it->second - want) <= rel * std::abs(want);
  }
  bool is_scalar(const std::string& name) const { return scalars.count(name) > 0; }
  // The input of binary node n other than v.
  const std::string& other(int n, const std::string& v) const {
    return nodes[n].input(0) == v ? nodes[n].input(1) : nodes[n].input(0);
  }
  bool binary(int n) const { return n >= 0 && nodes[n].input_size() == 2; }
  // A Transpose node's perm (empty where it has none).
  Shape perm(int k) const {
    for (const auto& a : nodes[k].attribute())
      if (a.name() == "perm") return Shape(a.ints().begin(), a.ints().end());
    return {};
  }
  void take(std::initializer_list<int> ks) {
    for (int k : ks)
      if (k >= 0) fused.insert(static_cast<size_t>(k));
  }
};

// A perm that swaps the last two axes and keeps the others.
bool swaps_last_two(const Shape& p) {
  const size_t r = p.size();
  if (r < 2) return false;
  for (size_t k = 0; k + 2 < r; ++k)
    if (p[k] != static_cast<int64_t>(k)) return false;
  return p[r - 2] == static_cast<int64_t>(r - 1) && p[r - 1] == static_cast<int64_t>(r - 2);
}

// ------------------------------------------------------------------ gelu ----

// The tail both forms share: h = 1 + f, then x * h * 0.5 in any
// association ((x * h) * 0.5, (x * 0.5) * h or x * (0.5 * h)). Returns the last node, or
// -1; parts gets the tail's nodes.
int gelu_tail(const Index& ix, const std::string& f_out, const std::string& x, std::vector<int>& parts) {
  const int plus = ix.only_reader(f_out, "Add");
  if (!ix.binary(plus) || !ix.scalar_is(ix.other(plus, f_out), 1.0)) return -1;
  const int mul = ix.only_reader(ix.at(plus).output(0), "Mul");
  if (!ix.binary(mul)) return -1;
  const std::string m = ix.other(mul, ix.at(plus).output(0));
  parts.push_back(plus);
  if (m == x) {  // (x * (1 + f)) * 0.5
    const int last = ix.only_reader(ix.at(mul).output(0), "Mul");
    if (!ix.binary(last) || !ix.scalar_is(ix.other(last, ix.at(mul).output(0)), 0.5)) return -1;
    parts.push_back(mul);
    return last;
  }
  if (ix.scalar_is(m, 0.5)) {  // x * (0.5 * (1 + f)) (the dynamo exporter's)
    const int last = ix.only_reader(ix.at(mul).output(0), "Mul");
    if (!ix.binary(last) || ix.other(last, ix.at(mul).output(0)) != x) return -1;
    parts.push_back(mul);
    return last;
  }
  const int half = ix.made_by(m, "Mul");  // (x * 0.5) * (1 + f)
  if (!ix.binary(half) || !ix.single(m) || (ix.at(half).input(0) != x && ix.at(half).input(1) != x) ||
      !ix.scalar_is(ix.other(half, x), 0.5))
    return -1;
  parts.push_back(half);
  return mul;
}

// Erf(x / sqrt 2) or Erf(x * sqrt 0.5): x, or "".
std::string erf_head(const Index& ix, int erf, std::vector<int>& parts) {
  const auto& e = ix.at(erf);
  if (e.input_size() != 1) return "";
  int div = ix.made_by(e.input(0), "Div");
  if (div < 0) div = ix.made_by(e.input(0), "Mul");
  if (!ix.binary(div) || !ix.single(e.input(0))) return "";
  const auto& d = ix.at(div);
  std::string x;
  if (d.op_type() == "Div" && ix.scalar_is(d.input(1), std::sqrt(2.0))) x = d.input(0);
  else if (d.op_type() == "Mul" && ix.scalar_is(d.input(1), std::sqrt(0.5))) x = d.input(0);
  else if (d.op_type() == "Mul" && ix.scalar_is(d.input(0), std::sqrt(0.5))) x = d.input(1);
  if (!x.empty()) parts.push_back(div);
  return x;
}

// Tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)), x^3 as Pow(x, 3), x * (x * x)
// or (x * x) * x: x, or "". The constants are matched to 1e-5 (torch writes
// them as float32).
std::string tanh_head(const Index& ix, int th, std::vector<int>& parts) {
  const auto& t = ix.at(th);
  if (t.input_size() != 1 || !ix.single(t.input(0))) return "";
  const int outer = ix.made_by(t.input(0), "Mul");
  if (!ix.binary(outer)) return "";
  const auto& o = ix.at(outer);
  const double c0 = std::sqrt(2.0 / M_PI);
  const std::string inner = ix.scalar_is(o.input(0), c0, 1e-5) ? o.input(1) : ix.scalar_is(o.input(1), c0, 1e-5) ? o.input(0) : "";
  if (inner.empty() || !ix.single(inner)) return "";
  const int sum = ix.made_by(inner, "Add");
  if (!ix.binary(sum)) return "";
  // One of sum's inputs is x, the other 0.044715 * x^3 (read only here).
  for (int side = 0; side < 2; ++side) {
    const std::string x = ix.at(sum).input(side), cubed = ix.at(sum).input(1 - side);
    if (!ix.single(cubed)) continue;
    const int scale = ix.made_by(cubed, "Mul");
    if (!ix.binary(scale)) continue;
    const auto& s = ix.at(scale);
    const std::string c = ix.scalar_is(s.input(0), 0.044715, 1e-5) ? s.input(1)
                          : ix.scalar_is(s.input(1), 0.044715, 1e-5) ? s.input(0) : "";
    if (c.empty() || !ix.single(c)) continue;
    std::vector<int> cube;
    if (int p = ix.made_by(c, "Pow"); ix.binary(p) && ix.at(p).input(0) == x && ix.scalar_is(ix.at(p).input(1), 3.0)) {
      cube = {p};
    } else if (int m = ix.made_by(c, "Mul"); ix.binary(m) && (ix.at(m).input(0) == x || ix.at(m).input(1) == x)) {
      const std::string sq = ix.other(m, x);
      const int m2 = ix.made_by(sq, "Mul");
      if (!ix.binary(m2) || !ix.single(sq) || ix.at(m2).input(0) != x || ix.at(m2).input(1) != x) continue;
      cube = {m, m2};
    } else {
      continue;
    }
    parts.insert(parts.end(), {outer, sum, scale});
    parts.insert(parts.end(), cube.begin(), cube.end());
    return x;
  }
  return "";
}

void find_gelu(OnnxFile& f, Index& ix) {
  for (int k = 0; k < ix.nodes.size(); ++k) {
    const std::string& op = ix.at(k).op_type();
    if ((op != "Erf" && op != "Tanh") || !ix.free(k)) continue;
    std::vector<int> parts{k};
    const std::string x = op == "Erf" ? erf_head(ix, k, parts) : tanh_head(ix, k, parts);
    if (x.empty()) continue;
    const int last = gelu_tail(ix, ix.at(k).output(0), x, parts);
    if (last < 0) continue;
    f.gelu_at[static_cast<size_t>(last)] = {x, op == "Tanh"};
    for (int p : parts) ix.take({p});
  }
}

// ------------------------------------------------------------------ silu ----

// Sigmoid(x) read only by a Mul whose other input is x.
void find_silu(OnnxFile& f, Index& ix) {
  for (int k = 0; k < ix.nodes.size(); ++k) {
    if (ix.at(k).op_type() != "Sigmoid" || !ix.free(k) || ix.at(k).input_size() != 1) continue;
    const std::string& x = ix.at(k).input(0);
    const std::string& s = ix.at(k).output(0);
    const int mul = ix.only_reader(s, "Mul");
    if (!ix.binary(mul) || ix.other(mul, s) != x) continue;
    f.silu_at[static_cast<size_t>(mul)] = {x};
    ix.take({k});
  }
}

// ------------------------------------------------------------- attention ----

// A Cast to float32: on the float scores or probabilities, nothing.
bool casts_to_float(const Index& ix, int c) {
  for (const auto& a : ix.at(c).attribute())
    if (a.name() == "to") return a.i() == onnx::TensorProto::FLOAT;
  return false;
}

// Whether v is computed from a weight (a float initializer of several
// numbers) or from the model's input, through any nodes but Shape (whose
// output is known when the model is read): a tensor of the graph, such as
// a learned relative position bias added to the scores, not a mask.
bool from_graph_tensor(const OnnxFile& f, const Index& ix, const std::string& v, std::set<std::string>& seen) {
  if (!seen.insert(v).second) return false;
  if (v == f.input) return true;
  if (auto it = f.initializers.find(v); it != f.initializers.end()) return it->second.is_float && it->second.size() > 1;
  auto p = ix.producer.find(v);
  if (p == ix.producer.end() || ix.at(p->second).op_type() == "Shape") return false;
  for (const auto& in : ix.at(p->second).input())
    if (!in.empty() && from_graph_tensor(f, ix, in, seen)) return true;
  return false;
}

void find_attention(OnnxFile& f, Index& ix) {
  for (int sm = 0; sm < ix.nodes.size(); ++sm) {
    if (ix.at(sm).op_type() != "Softmax" || !ix.free(sm) || ix.at(sm).input_size() != 1) continue;
    AttentionMatch m;
    m.softmax = sm;
    // Up from the softmax: a mask and a scale, in either order, then q kT.
    std::string s = ix.at(sm).input(0);
    for (int hop = 0; hop < 4 && ix.single(s); ++hop) {
      if (int c = ix.made_by(s, "Cast"); c >= 0 && m.casts.size() < 4 && casts_to_float(ix, c)) {
        m.casts.push_back(c);  // GPT-2's .to(dtype) of the scores: the same float tensor
        s = ix.at(c).input(0);
      } else if (int w = ix.made_by(s, "Where"); w >= 0 && m.mask < 0 && ix.at(w).input_size() == 3) {
        const auto& n = ix.at(w);
        auto ninf = [&](const std::string& v) { auto it = ix.scalars.find(v); return it != ix.scalars.end() && it->second <= -1e4; };
        if (ninf(n.input(1))) s = n.input(2);
        else if (ninf(n.input(2))) s = n.input(1), m.mask_inverted = true;
        else break;
        m.mask = w;
      } else if (int a = ix.made_by(s, "Add"); a >= 0 && m.mask < 0 && ix.binary(a)) {
        // scores + mask: the scores are the side a scale or q kT makes.
        const auto& n = ix.at(a);
        auto scores = [&](const std::string& v) {
          return ix.made_by(v, "Div") >= 0 || ix.made_by(v, "Mul") >= 0 || ix.made_by(v, "MatMul") >= 0;
        };
        const int side = scores(n.input(0)) ? 0 : scores(n.input(1)) ? 1 : -1;
        std::set<std::string> seen;
        if (side < 0 || from_graph_tensor(f, ix, n.input(1 - side), seen)) break;  // a bias: the plain ops take it
        s = n.input(side);
        m.mask_add = n.input(1 - side);
        m.mask = a;
      } else if (int c = ix.made_by(s, "Mul"); c >= 0 && m.scale < 0 && ix.binary(c) &&
                                                (ix.is_scalar(ix.at(c).input(0)) || ix.is_scalar(ix.at(c).input(1)))) {
        m.scale = c;
        s = ix.is_scalar(ix.at(c).input(1)) ? ix.at(c).input(0) : ix.at(c).input(1);
      } else if (int d = ix.made_by(s, "Div"); d >= 0 && m.scale < 0 && ix.binary(d)) {
        // By a number, or by one computed from shapes (GPT-2 divides by
        // full([], v.size(-1) ** 0.5)): checked a constant when converted.
        m.scale = d;
        s = ix.at(d).input(0);
      } else {
        break;
      }
    }
    // The scores may also be read by Shape nodes (DistilBERT's
    // mask.expand_as(scores)): they give the scores' shape, made by the match.
    std::vector<int> shapes;
    if (auto it = ix.readers.find(s); it != ix.readers.end() && !ix.outputs.count(s)) {
      for (int r : it->second)
        if (ix.at(r).op_type() == "Shape" && ix.free(r)) shapes.push_back(r);
      if (it->second.size() != shapes.size() + 1) continue;
    } else {
      continue;
    }
    m.qk = ix.made_by(s, "MatMul");
    if (!ix.binary(m.qk)) continue;
    // Down: dropout on the probabilities, then the product with v.
    std::string p = ix.at(sm).output(0);
    if (int c = ix.only_reader(p, "Cast"); c >= 0 && casts_to_float(ix, c)) {
      m.casts.push_back(c);
      p = ix.at(c).output(0);
    }
    if (int d = ix.only_reader(p, "Dropout"); d >= 0) {
      const auto& n = ix.at(d);
      if (n.output_size() > 1 && !n.output(1).empty() && ix.readers.count(n.output(1))) continue;  // its mask is read
      m.dropout = d;
      p = n.output(0);
    }
    m.av = ix.only_reader(p, "MatMul");
    if (!ix.binary(m.av) || ix.at(m.av).input(0) != p) continue;
    m.q = ix.at(m.qk).input(0);
    m.k = ix.at(m.qk).input(1);
    m.v = ix.at(m.av).input(1);
    // q scaled before the product (DistilBERT's q / sqrt(d)): the same
    // scale of the scores.
    if (int d = ix.single(m.q) ? ix.made_by(m.q, "Div") : -1; d >= 0 && m.scale < 0 && ix.binary(d) && ix.is_scalar(ix.at(d).input(1))) {
      m.scale = d;
      m.q = ix.at(d).input(0);
    } else if (int c = ix.single(m.q) ? ix.made_by(m.q, "Mul") : -1; c >= 0 && m.scale < 0 && ix.binary(c) &&
                                                                     ix.is_scalar(ix.at(c).input(1))) {
      m.scale = c;
      m.q = ix.at(c).input(0);
    }
    // The heads in place: q, v from Transpose [0, 2, 1, 3] of [B, T, H, D],
    // kT from Transpose [0, 2, 3, 1] of [B, S, H, D], the result back
    // through Transpose [0, 2, 1, 3].
    const int tq = ix.single(m.q) ? ix.made_by(m.q, "Transpose") : -1;
    const int tk = ix.single(m.k) ? ix.made_by(m.k, "Transpose") : -1;
    const int tv = ix.single(m.v) ? ix.made_by(m.v, "Transpose") : -1;
    const int to = ix.only_reader(ix.at(m.av).output(0), "Transpose");
    const Shape heads{0, 2, 1, 3};
    size_t result = static_cast<size_t>(m.av);
    if (tq >= 0 && tk >= 0 && tv >= 0 && to >= 0 && tq != tv && ix.perm(tq) == heads && ix.perm(tv) == heads &&
        ix.perm(to) == heads && ix.perm(tk) == Shape{0, 2, 3, 1}) {
      m.bthd = true;
      m.q = ix.at(tq).input(0);
      m.k = ix.at(tk).input(0);
      m.v = ix.at(tv).input(0);
      ix.take({tq, tk, tv, m.av});
      result = static_cast<size_t>(to);
      // Packed: q, k, v viewed as heads from the outputs 0, 1, 2 of one Split.
      const std::string* parts[3] = {&m.q, &m.k, &m.v};
      int reshape[3], split = -1;
      bool packed = true;
      for (int p = 0; p < 3 && packed; ++p) {
        reshape[p] = ix.single(*parts[p]) ? ix.made_by(*parts[p], "Reshape") : -1;
        packed = reshape[p] >= 0 && ix.at(reshape[p]).input_size() == 2 && ix.single(ix.at(reshape[p]).input(0));
        if (!packed) break;
        const int s = ix.made_by(ix.at(reshape[p]).input(0), "Split");
        packed = s >= 0 && (split < 0 || s == split) && ix.at(s).output_size() == 3 &&
                 ix.at(s).output(p) == ix.at(reshape[p]).input(0);
        split = s;
      }
      if (packed) {
        m.qkv = ix.at(split).input(0);
        m.split = split;
        m.reshape_q = reshape[0];
        ix.take({split, reshape[0], reshape[1], reshape[2]});
      }
    } else if (tk >= 0 && swaps_last_two(ix.perm(tk))) {
      m.k = ix.at(tk).input(0);
      ix.take({tk});
    } else {
      m.k_transposed = false;
    }
    ix.take({m.qk, m.scale, m.mask, sm, m.dropout});
    for (int c : m.casts) ix.take({c});
    for (int r : shapes) {
      ix.take({r});
      f.scores_shape_at[static_cast<size_t>(r)] = result;
    }
    f.attention_at[result] = m;
  }
}

// ------------------------------------------------------ stochastic depth ----

void find_stochastic_depth(OnnxFile& f, Index& ix) {
  for (int u = 0; u < ix.nodes.size(); ++u) {
    const auto& un = ix.at(u);
    if (un.op_type() != "RandomUniformLike" || !ix.free(u)) continue;
    double low = 0, high = 1;
    for (const auto& a : un.attribute()) {
      if (a.name() == "low") low = a.f();
      if (a.name() == "high") high = a.f();
    }
    if (low != 0 || high != 1) continue;
    // The noise's readers: the Less, and (the dynamo exporter's) a CastLike
    // of the survival probability to the noise's type, the Less's s.
    int less = -1, like = -1;
    const auto rd = ix.readers.find(un.output(0));
    if (rd == ix.readers.end()) continue;
    for (int r : rd->second) {
      const auto& rn = ix.at(r);
      if (rn.op_type() == "Less" && less < 0 && ix.free(r)) less = r;
      else if (rn.op_type() == "CastLike" && like < 0 && rn.input_size() == 2 && rn.input(1) == un.output(0)) like = r;
      else less = -2;
    }
    if (less < 0 || ix.outputs.count(un.output(0)) || !ix.binary(less) || ix.at(less).input(0) != un.output(0)) continue;
    if (like >= 0 && (ix.at(less).input(1) != ix.at(like).output(0) || !ix.single(ix.at(like).output(0)))) continue;
    auto s = ix.scalars.find(ix.at(less).input(1));
    if (s == ix.scalars.end() || !(s->second > 0 && s->second <= 1)) continue;
    // Cast to float (TorchScript's export), or CastLike the noise's zeros
    // (the dynamo exporter's).
    int cast = ix.only_reader(ix.at(less).output(0), "Cast");
    if (cast >= 0 && !casts_to_float(ix, cast)) continue;
    if (cast < 0) cast = ix.only_reader(ix.at(less).output(0), "CastLike");
    if (cast < 0) continue;
    const int div = ix.only_reader(ix.at(cast).output(0), "Div");
    if (!ix.binary(div) || ix.at(div).input(0) != ix.at(cast).output(0) || !ix.scalar_is(ix.at(div).input(1), s->second))
      continue;
    ix.take({u, less, cast, like});
    f.depth_at[static_cast<size_t>(div)] = StochasticDepthMatch{u, s->second};
  }
}

// ---------------------------------------------------------------- matmul ----

void find_matmuls(OnnxFile& f, Index& ix) {
  for (int k = 0; k < ix.nodes.size(); ++k) {
    if (ix.at(k).op_type() != "MatMul" || !ix.free(k) || !ix.binary(k)) continue;
    MatMulMatch m;
    m.matmul = k;
    m.a = ix.at(k).input(0);
    m.b = ix.at(k).input(1);
    int ta = ix.single(m.a) ? ix.made_by(m.a, "Transpose") : -1;
    int tb = ix.single(m.b) ? ix.made_by(m.b, "Transpose") : -1;
    if (ta >= 0 && swaps_last_two(ix.perm(ta))) m.a = ix.at(ta).input(0), m.trans_a = true;
    else ta = -1;
    if (tb >= 0 && swaps_last_two(ix.perm(tb))) m.b = ix.at(tb).input(0), m.trans_b = true;
    else tb = -1;
    // A bias: an Add of a 1-d float initializer, the MatMul's only reader.
    size_t result = static_cast<size_t>(k);
    const std::string& out = ix.at(k).output(0);
    if (int add = ix.only_reader(out, "Add"); ix.binary(add)) {
      const std::string& c = ix.other(add, out);
      auto init = f.initializers.find(c);
      if (init != f.initializers.end() && init->second.is_float && init->second.dims.size() == 1) {
        m.bias = c;
        ix.take({k});
        result = static_cast<size_t>(add);
      }
    }
    if (!m.trans_a && !m.trans_b && m.bias.empty()) continue;
    ix.take({ta, tb});
    f.matmul_at[result] = m;
  }
}

// The Transposes (and Y's Squeeze) around each RNN, GRU and LSTM node
// (RecurrentMatch). Squeeze's axes are checked when the match is converted.
bool recurrent_op(const onnx::NodeProto& n) { return n.op_type() == "RNN" || n.op_type() == "GRU" || n.op_type() == "LSTM"; }

// The integers of an integer initializer or Constant node `name`.
bool ints_of(const OnnxFile& f, const Index& ix, const std::string& name, std::vector<int64_t>& out) {
  if (auto it = f.initializers.find(name); it != f.initializers.end()) {
    if (it->second.is_float) return false;
    out = it->second.i;
    return true;
  }
  auto p = ix.producer.find(name);
  if (p == ix.producer.end() || ix.at(p->second).op_type() != "Constant") return false;
  for (const auto& a : ix.at(p->second).attribute())
    if (a.name() == "value") {
      const Const c = read_tensor(f, a.t(), "node '" + ix.at(p->second).name() + "''s value");
      if (c.is_float) return false;
      out = c.i;
      return true;
    }
  return false;
}

// The rows (first axis) of v, each as (float initializer, its row), through
// Concat and Slice (steps 1) along axis 0; false where v is made another
// way. `nodes` gathers the nodes passed through.
using Rows = std::vector<std::pair<std::string, int64_t>>;
bool rows_of(const OnnxFile& f, const Index& ix, const std::string& v, Rows& out, std::vector<int>& nodes, int depth = 0) {
  if (depth > 16) return false;
  if (auto it = f.initializers.find(v); it != f.initializers.end()) {
    // (a weight's rows; a [2^40, 0] tensor holds no data but as many rows)
    if (!it->second.is_float || it->second.dims.empty() || it->second.dims[0] > (int64_t(1) << 20) ||
        out.size() > (size_t(1) << 20))
      return false;
    for (int64_t r = 0; r < it->second.dims[0]; ++r) out.push_back({v, r});
    return true;
  }
  auto p = ix.producer.find(v);
  if (p == ix.producer.end() || !ix.free(p->second)) return false;
  const onnx::NodeProto& n = ix.at(p->second);
  auto attr_ints = [&](const char* name, std::vector<int64_t>& to) {
    for (const auto& a : n.attribute())
      if (a.name() == name) {
        to.assign(a.ints().begin(), a.ints().end());
        return true;
      }
    return false;
  };
  if (n.op_type() == "Concat") {
    for (const auto& a : n.attribute())
      if (a.name() == "axis" && a.i() != 0) return false;
    for (const auto& i : n.input())
      if (!rows_of(f, ix, i, out, nodes, depth + 1)) return false;
  } else if (n.op_type() == "Slice" && n.input_size() >= 1) {
    std::vector<int64_t> st, en, ax{0}, steps{1};
    const bool inputs = n.input_size() >= 3;
    if (inputs ? !ints_of(f, ix, n.input(1), st) || !ints_of(f, ix, n.input(2), en) : !attr_ints("starts", st) || !attr_ints("ends", en))
      return false;
    if (inputs && n.input_size() > 3 && !n.input(3).empty() && !ints_of(f, ix, n.input(3), ax)) return false;
    if (!inputs) attr_ints("axes", ax);
    if (inputs && n.input_size() > 4 && !n.input(4).empty() && !ints_of(f, ix, n.input(4), steps)) return false;
    if (st.size() != 1 || en.size() != 1 || ax != std::vector<int64_t>{0} || steps != std::vector<int64_t>{1}) return false;
    Rows all;
    if (!rows_of(f, ix, n.input(0), all, nodes, depth + 1)) return false;
    const auto d = static_cast<int64_t>(all.size());
    auto clampi = [&](int64_t x) { return std::clamp(x < 0 ? x + d : x, int64_t(0), d); };
    for (int64_t r = clampi(st[0]); r < clampi(en[0]); ++r) out.push_back(all[static_cast<size_t>(r)]);
  } else {
    return false;
  }
  nodes.push_back(p->second);
  return true;
}

// The parameters W, R and B of recurrent node k are made of, where its gate
// reordering undoes the exporter's (RecurrentMatch::w_ih ...): `order` is
// the ONNX block of each of memfit's gates, H the hidden size.
void direct_weights(const OnnxFile& f, Index& ix, int k, const std::vector<int64_t>& order, int64_t H, RecurrentMatch& m) {
  const onnx::NodeProto& n = ix.at(k);
  if (n.input_size() < 4 || H < 1) return;
  const auto G = static_cast<int64_t>(order.size()) * H;
  std::vector<int> nodes;
  // The rows of input i past its Unsqueeze(axes [0]).
  auto rows = [&](int i, Rows& out) {
    const int u = ix.made_by(n.input(i), "Unsqueeze");
    if (u < 0 || !ix.single(n.input(i)) || ix.at(u).input_size() < 1) return false;
    std::vector<int64_t> axes;
    bool have = false;
    for (const auto& a : ix.at(u).attribute())
      if (a.name() == "axes") axes.assign(a.ints().begin(), a.ints().end()), have = true;
    if (!have && (ix.at(u).input_size() < 2 || !ints_of(f, ix, ix.at(u).input(1), axes))) return false;
    if (axes != std::vector<int64_t>{0}) return false;
    nodes.push_back(u);
    return rows_of(f, ix, ix.at(u).input(0), out, nodes);
  };
  // The parameter whose rows, in order, are memfit's rows of block `from`.
  auto param = [&](const Rows& r, int64_t from) -> std::string {
    if (static_cast<int64_t>(r.size()) < from + G) return "";
    const std::string& p = r[static_cast<size_t>(from)].first;
    if (f.initializers.at(p).dims[0] != G) return "";
    for (int64_t j = 0; j < G; ++j) {
      const auto& src = r[static_cast<size_t>(from + order[static_cast<size_t>(j / H)] * H + j % H)];
      if (src.first != p || src.second != j) return "";
    }
    return p;
  };
  Rows w, rr, b;
  if (!rows(1, w) || !rows(2, rr) || !rows(3, b) || w.size() != size_t(G) || rr.size() != size_t(G) || b.size() != size_t(2 * G)) return;
  const std::string wi = param(w, 0), wh = param(rr, 0), bi = param(b, 0), bh = param(b, G);
  if (wi.empty() || wh.empty() || bi.empty() || bh.empty()) return;
  // Every node passed through must feed this one alone.
  for (int x : nodes)
    for (const auto& o : ix.at(x).output())
      if (!ix.single(o)) return;
  m.w_ih = wi, m.w_hh = wh, m.b_ih = bi, m.b_hh = bh;
  for (int x : nodes) ix.take({x});
}

void find_recurrent(OnnxFile& f, Index& ix) {
  const Shape swap01{1, 0, 2};
  for (int k = 0; k < ix.nodes.size(); ++k) {
    const onnx::NodeProto& n = ix.at(k);
    if (!recurrent_op(n)) continue;
    RecurrentMatch& m = f.recurrent_at[static_cast<size_t>(k)];  // x may be set already: the layer below's y
    if (m.x.empty() && n.input_size() > 0) {
      const int t = ix.made_by(n.input(0), "Transpose");
      if (t >= 0 && ix.perm(t) == swap01 && ix.single(n.input(0)) && ix.at(t).input_size() == 1) {
        m.x = ix.at(t).input(0);
        ix.take({t});
      }
    }
    if (n.output_size() > 0 && !n.output(0).empty()) {
      const int sq = ix.only_reader(n.output(0), "Squeeze");
      const std::string sq_out = sq >= 0 ? ix.at(sq).output(0) : "";
      std::vector<int> transposes;
      int next = -1;
      bool all = sq >= 0 && !ix.outputs.count(sq_out) && ix.readers.count(sq_out);
      for (int r : all ? ix.readers.at(sq_out) : std::vector<int>{}) {
        const onnx::NodeProto& rn = ix.at(r);
        if (ix.free(r) && rn.op_type() == "Transpose" && ix.perm(r) == swap01) {
          transposes.push_back(r);
        } else if (next < 0 && r > k && recurrent_op(rn) && rn.input(0) == sq_out &&
                   std::count(rn.input().begin(), rn.input().end(), sq_out) == 1) {
          next = r;
        } else {
          all = false;
        }
      }
      if (all) {
        m.squeeze = sq, m.transposes = transposes;
        ix.take({sq});
        for (int t : transposes) ix.take({t});
        if (next >= 0) {
          m.chain = sq_out + "#batch_first";
          f.recurrent_at[static_cast<size_t>(next)].x = m.chain;
        }
      }
    }
    int64_t H = 0;
    for (const auto& a : n.attribute())
      if (a.name() == "hidden_size") H = a.i();
    const std::vector<int64_t> order = n.op_type() == "LSTM" ? std::vector<int64_t>{0, 2, 3, 1}
                                       : n.op_type() == "GRU" ? std::vector<int64_t>{1, 0, 2}
                                                               : std::vector<int64_t>{0};
    direct_weights(f, ix, k, order, H, m);
    std::vector<std::string> todo;
    for (int i = 1; i <= 3 && i < n.input_size(); ++i) todo.push_back(n.input(i));
    for (size_t guard = 0; !todo.empty() && guard < 4096; ++guard) {
      const std::string v = todo.back();
      todo.pop_back();
      if (auto it = f.initializers.find(v); it != f.initializers.end()) {
        if (it->second.is_float) f.recurrent_weights.insert(v);
        continue;
      }
      auto p = ix.producer.find(v);
      if (p == ix.producer.end()) continue;
      const onnx::NodeProto& w = ix.at(p->second);
      const std::string& op = w.op_type();
      if (op == "Concat") {
        for (const auto& i : w.input()) todo.push_back(i);
      } else if ((op == "Slice" || op == "Unsqueeze" || op == "Reshape" || op == "Squeeze" || op == "Identity") &&
                 w.input_size() > 0) {
        todo.push_back(w.input(0));
      }
    }
  }
}

}  // namespace

void find_patterns(OnnxFile& f, const std::map<std::string, double>& scalars) {
  Index ix(f, scalars, f.fused);
  find_recurrent(f, ix);
  find_gelu(f, ix);
  find_silu(f, ix);
  find_attention(f, ix);
  find_matmuls(f, ix);
  find_stochastic_depth(f, ix);
}

}  // namespace memfit::models::onnx_import
