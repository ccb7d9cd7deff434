// ONNX import (onnx_model.hpp). The file is parsed once with Debian's ONNX
// protobuf classes (libonnx-dev); the float initializers are moved out of the
// protobuf into shared arrays that become the parameters' initial values
// (InitSpec::Given), and the node list is kept to be replayed onto a Builder
// each time a step graph is built (the budget search builds several).
//
// While converting, a name is either a graph value (an activation or a
// parameter) or a constant known at import time: a Constant node, an
// integer initializer, or a shape computed from memfit's static shapes
// (Shape -> Gather -> Concat -> Reshape, as torch exports x.view(x.size(0),
// -1)). Constants feed shapes, axes and scalar factors only; memfit has no
// op that reads a constant tensor.
#include "models/onnx_model.hpp"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>


namespace memfit::models {
namespace {

// protobuf refuses messages over 2 GiB; so does the importer, before reading.
constexpr uintmax_t kMaxFileBytes = uintmax_t(2) << 30;

// A tensor known at import time. Floats and integers are kept apart: floats
// are weights or scalar factors, integers are shapes, axes and indices.
struct Const {
  Shape dims;
  bool is_float = false;
  std::shared_ptr<const std::vector<float>> f;
  std::vector<int64_t> i;
  int64_t size() const { return is_float ? static_cast<int64_t>(f->size()) : static_cast<int64_t>(i.size()); }
};

struct OnnxFile {
  std::string path;
  onnx::GraphProto graph;                   // nodes and the input/output types; initializers moved out
  std::map<std::string, Const> initializers;
  std::string input, output;
  int64_t opset = 0;                        // of the default domain
  int64_t out_rank = 0;                     // the output's rank
  Shape input_dims;                         // -1: a dynamic axis
  bool tokens = false;                      // an integer input: token ids
  // The exact GELU torch exports, x * 0.5 * (1 + Erf(x / sqrt 2)): the node
  // index that produces its result -> x's name, and the nodes it replaces.
  std::map<size_t, std::string> gelu_at;
  std::set<size_t> fused;
};

[[noreturn]] void file_error(const OnnxFile& f, const std::string& msg) { throw ModelFileError(f.path + ": " + msg); }

[[noreturn]] void refuse(const OnnxFile& f, const onnx::NodeProto& n, const std::string& msg) {
  file_error(f, "node '" + n.name() + "' (" + n.op_type() + "): " + msg);
}

// The module path of a node from torch's scoped names:
// "/layer1/layer1.0/conv1/Conv" -> "layer1.0.conv1" (each scope repeats its
// parent's name), "/Relu_2" -> "" (made outside any submodule).
std::string module_path(const std::string& node_name) {
  std::vector<std::string> parts;
  size_t start = node_name.rfind('/', 0) == 0 ? 1 : 0;
  for (size_t slash; (slash = node_name.find('/', start)) != std::string::npos; start = slash + 1)
    parts.push_back(node_name.substr(start, slash - start));
  std::string path, last;
  for (const std::string& p : parts) {
    if (!last.empty() && p.rfind(last + ".", 0) == 0) path += p.substr(last.size());
    else path += (path.empty() ? "" : ".") + p;
    last = p;
  }
  return path;
}

// ---------------------------------------------------------------- tensors ----

Const read_tensor(const OnnxFile& f, const onnx::TensorProto& t, const std::string& what) {
  Const c;
  for (int64_t d : t.dims()) {
    if (d < 0) file_error(f, what + " has a negative dimension");
    c.dims.push_back(d);
  }
  const int64_t n = numel(c.dims);
  if (t.data_location() == onnx::TensorProto::EXTERNAL)
    file_error(f, what + " is stored outside the file (external data): export a model under 2 GiB, whose weights "
                         "the .onnx file holds");
  const std::string& raw = t.raw_data();
  auto check = [&](int64_t have, size_t elem) {
    if (have != n)
      file_error(f, what + " holds " + std::to_string(have) + " values for its shape " + shape_str(c.dims) +
                        " (truncated or corrupt file)");
    (void)elem;
  };
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT: {
      auto v = std::make_shared<std::vector<float>>();
      if (!raw.empty()) {
        check(static_cast<int64_t>(raw.size() / 4), 4);
        if (raw.size() % 4) file_error(f, what + ": its float data is not a whole number of values");
        v->resize(raw.size() / 4);
        std::memcpy(v->data(), raw.data(), raw.size());  // little-endian, as ONNX stores it
      } else {
        check(t.float_data_size(), 4);
        v->assign(t.float_data().begin(), t.float_data().end());
      }
      c.is_float = true;
      c.f = std::move(v);
      return c;
    }
    case onnx::TensorProto::DOUBLE: {  // scalar factors only; weights are float
      auto v = std::make_shared<std::vector<float>>();
      if (!raw.empty()) {
        check(static_cast<int64_t>(raw.size() / 8), 8);
        for (size_t k = 0; k + 8 <= raw.size(); k += 8) {
          double d;
          std::memcpy(&d, raw.data() + k, 8);
          v->push_back(static_cast<float>(d));
        }
      } else {
        check(t.double_data_size(), 8);
        for (double d : t.double_data()) v->push_back(static_cast<float>(d));
      }
      c.is_float = true;
      c.f = std::move(v);
      return c;
    }
    case onnx::TensorProto::INT64:
    case onnx::TensorProto::INT32:
    case onnx::TensorProto::BOOL: {
      const size_t elem = t.data_type() == onnx::TensorProto::INT64 ? 8 : t.data_type() == onnx::TensorProto::INT32 ? 4 : 1;
      if (!raw.empty()) {
        check(static_cast<int64_t>(raw.size() / elem), elem);
        for (size_t k = 0; k + elem <= raw.size(); k += elem) {
          int64_t v = 0;
          if (elem == 8) std::memcpy(&v, raw.data() + k, 8);
          else if (elem == 4) { int32_t w; std::memcpy(&w, raw.data() + k, 4); v = w; }
          else v = raw[k] != 0;
          c.i.push_back(v);
        }
      } else if (t.data_type() == onnx::TensorProto::INT64) {
        check(t.int64_data_size(), 8);
        c.i.assign(t.int64_data().begin(), t.int64_data().end());
      } else {
        check(t.int32_data_size(), 4);
        c.i.assign(t.int32_data().begin(), t.int32_data().end());
      }
      return c;
    }
    default:
      file_error(f, what + " has ONNX data type " + std::to_string(t.data_type()) +
                        ", which memfit does not read (float, double, int64, int32, bool)");
  }
}

// ------------------------------------------------------------ conversion ----

struct Env {
  const OnnxFile& f;
  Builder& b;
  std::map<std::string, ValueId> values;  // graph values by ONNX name
  std::map<std::string, Const> consts;    // import-time constants by name
  std::set<std::string> layers;           // layer names given out
  int64_t batch = 0;                      // memfit's batch (the input's axis 0)
};

using Handler = void (*)(Env&, const onnx::NodeProto&);

const onnx::AttributeProto* attr(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}
int64_t attr_i(const onnx::NodeProto& n, const std::string& name, int64_t dflt) {
  const auto* a = attr(n, name);
  return a ? a->i() : dflt;
}
double attr_f(const onnx::NodeProto& n, const std::string& name, double dflt) {
  const auto* a = attr(n, name);
  return a ? static_cast<double>(a->f()) : dflt;
}
std::string attr_s(const onnx::NodeProto& n, const std::string& name, const std::string& dflt) {
  const auto* a = attr(n, name);
  return a ? a->s() : dflt;
}
Shape attr_ints(const onnx::NodeProto& n, const std::string& name, Shape dflt) {
  const auto* a = attr(n, name);
  return a ? Shape(a->ints().begin(), a->ints().end()) : dflt;
}

bool has_input(const onnx::NodeProto& n, int k) { return n.input_size() > k && !n.input(k).empty(); }
bool is_const(Env& e, const std::string& name) { return e.consts.count(name) || (!e.values.count(name) && e.f.initializers.count(name)); }

const Const& constant(Env& e, const onnx::NodeProto& n, int k) {
  const std::string& name = n.input(k);
  if (auto it = e.consts.find(name); it != e.consts.end()) return it->second;
  if (auto it = e.f.initializers.find(name); it != e.f.initializers.end()) return it->second;
  refuse(e.f, n, "input '" + name + "' must be known when the model is read (a constant or a shape), but it is "
                 "computed by the graph: memfit's shapes are fixed");
}
std::vector<int64_t> const_ints(Env& e, const onnx::NodeProto& n, int k) {
  const Const& c = constant(e, n, k);
  if (c.is_float) refuse(e.f, n, "input '" + n.input(k) + "' must hold integers");
  return c.i;
}
double const_scalar(Env& e, const onnx::NodeProto& n, int k) {
  const Const& c = constant(e, n, k);
  if (c.size() != 1) refuse(e.f, n, "input '" + n.input(k) + "' must be a single number, got " + shape_str(c.dims));
  return c.is_float ? static_cast<double>((*c.f)[0]) : static_cast<double>(c.i[0]);
}

// The graph value of input k; an initializer becomes a parameter (a buffer
// for batch-norm statistics) under its ONNX name the first time it is read.
// Vectors (biases, norm scales and shifts) are exempt from weight decay
// when the optimizer keeps them undecayed, as the builder's layers mark them.
ValueId value(Env& e, const onnx::NodeProto& n, int k, bool buffer = false) {
  const std::string& name = n.input(k);
  if (auto it = e.values.find(name); it != e.values.end()) return it->second;
  auto init = e.f.initializers.find(name);
  if (init == e.f.initializers.end() || !init->second.is_float) {
    if (e.consts.count(name) || init != e.f.initializers.end())
      refuse(e.f, n, "reads the constant '" + name + "' as a tensor: memfit takes constants as shapes, axes and "
                     "scalar factors only");
    refuse(e.f, n, "reads '" + name + "', which no earlier node makes (a truncated or unsorted graph)");
  }
  const Const& c = init->second;
  ValueId v = buffer ? e.b.g.buffer(name, c.dims) : e.b.g.param(name, c.dims);
  e.b.g.value(v).init = InitSpec{InitSpec::Given, 0, c.f};
  if (!buffer && c.dims.size() < 2) no_weight_decay(e.b, v);
  return e.values[name] = v;
}

// A copy: adding a node may move the graph's values.
Shape shape_of(Env& e, ValueId v) { return e.b.g.value(v).shape; }

// A node's layer name: its module path, made unique (two calls of one
// module get separate dropout streams), or the node's own name.
std::string layer_of(Env& e, const onnx::NodeProto& n) {
  std::string l = module_path(n.name());
  if (l.empty() || e.layers.count(l)) l = n.name().empty() ? n.op_type() + std::to_string(e.layers.size()) : n.name();
  while (e.layers.count(l)) l += "'";
  e.layers.insert(l);
  return l;
}

void bind(Env& e, const onnx::NodeProto& n, ValueId v, int k = 0) { e.values[n.output(k)] = v; }
void bind_const(Env& e, const onnx::NodeProto& n, Const c, int k = 0) { e.consts[n.output(k)] = std::move(c); }

// Outputs past the first must be unused (a pool's indices, dropout's mask,
// batch-norm's updated statistics: memfit keeps those itself).
void first_output_only(Env& e, const onnx::NodeProto& n, const std::set<std::string>& used) {
  if (n.op_type() == "Split") return;  // gives them all
  for (int k = 1; k < n.output_size(); ++k)
    if (!n.output(k).empty() && used.count(n.output(k)))
      refuse(e.f, n, "its output " + std::to_string(k) + " ('" + n.output(k) + "') is read by the graph; memfit "
                     "gives this op's first output only");
}

int64_t axis_in(Env& e, const onnx::NodeProto& n, int64_t axis, size_t rank) {
  const auto r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r) refuse(e.f, n, "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(r));
  return axis < 0 ? axis + r : axis;
}

// Two equal pads per axis: ONNX's [top, left, bottom, right] with top =
// bottom and left = right (memfit pads symmetrically).
Shape symmetric_pads(Env& e, const onnx::NodeProto& n) {
  const Shape p = attr_ints(n, "pads", {0, 0, 0, 0});
  if (p.size() != 4 || p[0] != p[2] || p[1] != p[3])
    refuse(e.f, n, "pads " + shape_str(p) + ": memfit pads both sides of an axis alike (begin = end)");
  return {p[0], p[1]};
}

void no_auto_pad(Env& e, const onnx::NodeProto& n) {
  const std::string a = attr_s(n, "auto_pad", "NOTSET");
  if (a != "NOTSET" && a != "VALID" && !a.empty())
    refuse(e.f, n, "attribute auto_pad=" + a + " is not supported (NOTSET or VALID; export with explicit padding)");
  if (a == "VALID" && attr(n, "pads") && symmetric_pads(e, n) != Shape{0, 0})
    refuse(e.f, n, "auto_pad=VALID with nonzero pads");
}

Shape pair(Env& e, const onnx::NodeProto& n, const std::string& name, int64_t dflt) {
  const Shape v = attr_ints(n, name, {dflt, dflt});
  if (v.size() != 2) refuse(e.f, n, "attribute " + name + " " + shape_str(v) + ": memfit takes 2-d " + n.op_type() + " only");
  return v;
}

void op_conv(Env& e, const onnx::NodeProto& n) {
  no_auto_pad(e, n);
  const ValueId x = value(e, n, 0), w = value(e, n, 1);
  if (shape_of(e, x).size() != 4 || shape_of(e, w).size() != 4)
    refuse(e.f, n, "memfit takes 2-d convolutions only: input " + shape_str(shape_of(e, x)) + ", weight " +
                   shape_str(shape_of(e, w)));
  if (const auto* k = attr(n, "kernel_shape"); k && Shape(k->ints().begin(), k->ints().end()) !=
                                                     Shape{shape_of(e, w)[2], shape_of(e, w)[3]})
    refuse(e.f, n, "kernel_shape does not match the weight " + shape_str(shape_of(e, w)));
  std::vector<ValueId> ins{x, w};
  if (has_input(n, 2)) ins.push_back(value(e, n, 2));
  Attrs a{{"stride", pair(e, n, "strides", 1)},
          {"pad", symmetric_pads(e, n)},
          {"dilation", pair(e, n, "dilations", 1)},
          {"groups", attr_i(n, "group", 1)}};
  bind(e, n, e.b.g.add1("conv2d", ins, std::move(a), layer_of(e, n)));
}

// Gemm: Y = A op(B) + C with alpha = beta = 1. A Linear (B [N, K] with
// transB, C [N]) is memfit's linear; otherwise a matmul and a broadcast add.
void op_gemm(Env& e, const onnx::NodeProto& n) {
  if (attr_i(n, "transA", 0) != 0) refuse(e.f, n, "attribute transA=1 is not supported");
  if (attr_f(n, "alpha", 1.0) != 1.0 || attr_f(n, "beta", 1.0) != 1.0)
    refuse(e.f, n, "attributes alpha and beta must be 1");
  const bool tb = attr_i(n, "transB", 0) != 0;
  const ValueId a = value(e, n, 0), w = value(e, n, 1);
  const std::string layer = layer_of(e, n);
  ValueId c = kNone;
  if (has_input(n, 2)) {
    c = value(e, n, 2);
    const Shape cs = shape_of(e, c);
    const int64_t out = shape_of(e, w).size() == 2 ? shape_of(e, w)[tb ? 0 : 1] : -1;
    if (cs != Shape{out}) refuse(e.f, n, "its C " + shape_str(cs) + " must be [" + std::to_string(out) + "] (a bias)");
  }
  if (tb) {
    std::vector<ValueId> ins{a, w};
    if (c != kNone) ins.push_back(c);
    bind(e, n, e.b.g.add1("linear", ins, {}, layer));
    return;
  }
  ValueId y = e.b.g.add1("matmul", {a, w}, {{"trans_a", int64_t(0)}, {"trans_b", int64_t(0)}}, layer);
  bind(e, n, c == kNone ? y : add_broadcast(e.b, y, c));
}

void op_matmul(Env& e, const onnx::NodeProto& n) {
  const ValueId a = value(e, n, 0), w = value(e, n, 1);
  bind(e, n, e.b.g.add1("matmul", {a, w}, {{"trans_a", int64_t(0)}, {"trans_b", int64_t(0)}}, layer_of(e, n)));
}

void op_relu(Env& e, const onnx::NodeProto& n) { bind(e, n, relu(e.b, value(e, n, 0))); }

void op_gelu(Env& e, const onnx::NodeProto& n) {
  const std::string a = attr_s(n, "approximate", "none");
  if (a != "none" && a != "tanh") refuse(e.f, n, "attribute approximate=" + a + " (none or tanh)");
  bind(e, n, gelu(e.b, value(e, n, 0), a == "tanh"));
}

void op_pool(Env& e, const onnx::NodeProto& n, bool max) {
  no_auto_pad(e, n);
  if (attr_i(n, "ceil_mode", 0) != 0) refuse(e.f, n, "attribute ceil_mode=1 is not supported (floor only)");
  if (attr(n, "dilations") && pair(e, n, "dilations", 1) != Shape{1, 1})
    refuse(e.f, n, "attribute dilations " + shape_str(attr_ints(n, "dilations", {})) + " is not supported (1 only)");
  if (attr_i(n, "storage_order", 0) != 0) refuse(e.f, n, "attribute storage_order=1 is not supported");
  const ValueId x = value(e, n, 0);
  if (shape_of(e, x).size() != 4) refuse(e.f, n, "memfit takes 2-d pooling only, input " + shape_str(shape_of(e, x)));
  if (!attr(n, "kernel_shape")) refuse(e.f, n, "has no kernel_shape");
  Attrs a{{"kernel", pair(e, n, "kernel_shape", 1)}, {"stride", pair(e, n, "strides", 1)}, {"pad", symmetric_pads(e, n)}};
  if (!max) a.set("count_include_pad", attr_i(n, "count_include_pad", 0));
  bind(e, n, e.b.g.add_node(max ? "max_pool2d" : "avg_pool2d", {x}, std::move(a), layer_of(e, n))[0]);
}
void op_maxpool(Env& e, const onnx::NodeProto& n) { op_pool(e, n, true); }
void op_avgpool(Env& e, const onnx::NodeProto& n) { op_pool(e, n, false); }

void op_global_avg_pool(Env& e, const onnx::NodeProto& n) {
  const ValueId x = value(e, n, 0);
  const Shape s = shape_of(e, x);
  if (s.size() != 4) refuse(e.f, n, "memfit takes [N, C, H, W] only, got " + shape_str(s));
  bind(e, n, reshape(e.b, global_avg_pool(e.b, x), {s[0], s[1], 1, 1}));  // ONNX keeps the 1x1 axes
}

// Training-mode batch norm: batch statistics forward, running statistics
// updated (ONNX momentum is the running value's weight, PyTorch's is the
// batch's: memfit takes PyTorch's).
void op_batchnorm(Env& e, const onnx::NodeProto& n) {
  if (attr_i(n, "training_mode", 0) != 1)
    refuse(e.f, n, "exported for inference (training_mode=0): export with training=torch.onnx.TrainingMode.TRAINING "
                   "(opset >= 14) so that memfit trains it with batch statistics");
  const ValueId x = value(e, n, 0);
  const ValueId gamma = value(e, n, 1), beta = value(e, n, 2);
  const ValueId rm = value(e, n, 3, true), rv = value(e, n, 4, true);
  Attrs a{{"eps", attr_f(n, "epsilon", 1e-5)}, {"momentum", 1.0 - attr_f(n, "momentum", 0.9)},
          {"training", int64_t(e.b.training)}};
  bind(e, n, e.b.g.add_node("batch_norm", {x, gamma, beta, rm, rv}, std::move(a), layer_of(e, n))[0]);
}

void op_layernorm(Env& e, const onnx::NodeProto& n) {
  const ValueId x = value(e, n, 0);
  const size_t r = shape_of(e, x).size();
  if (axis_in(e, n, attr_i(n, "axis", -1), r) != static_cast<int64_t>(r) - 1)
    refuse(e.f, n, "normalises from axis " + std::to_string(attr_i(n, "axis", -1)) + ": memfit normalises the last axis only");
  if (!has_input(n, 2)) refuse(e.f, n, "has no bias input (memfit's layer norm has one)");
  const ValueId gamma = value(e, n, 1), beta = value(e, n, 2);
  bind(e, n, e.b.g.add_node("layer_norm", {x, gamma, beta}, {{"eps", attr_f(n, "epsilon", 1e-5)}}, layer_of(e, n))[0]);
}

// b without its leading 1 axes, if that is a's trailing axes (a bias
// [1, C] or [C] over [N, C]); empty otherwise.
Shape trailing_of(const Shape a, Shape b) {
  while (!b.empty() && b[0] == 1 && b.size() > 1) b.erase(b.begin());
  if (b.size() > a.size() || !std::equal(b.begin(), b.end(), a.end() - static_cast<int64_t>(b.size()))) return {};
  return b;
}

// Integer arithmetic on import-time constants (shape computations).
bool fold_int(Env& e, const onnx::NodeProto& n) {
  if (!is_const(e, n.input(0)) || !is_const(e, n.input(1))) return false;
  const Const &a = constant(e, n, 0), &c = constant(e, n, 1);
  if (a.is_float || c.is_float || (a.size() != c.size() && c.size() != 1)) return false;
  Const r = a;
  for (size_t k = 0; k < r.i.size(); ++k) {
    const int64_t y = c.i[c.size() == 1 ? 0 : k];
    const std::string& op = n.op_type();
    if (op == "Div" && y == 0) refuse(e.f, n, "divides by zero");
    r.i[k] = op == "Add" ? r.i[k] + y : op == "Mul" ? r.i[k] * y : r.i[k] / y;
  }
  bind_const(e, n, std::move(r));
  return true;
}

void op_add(Env& e, const onnx::NodeProto& n) {
  if (fold_int(e, n)) return;
  const ValueId a = value(e, n, 0), c = value(e, n, 1);
  const Shape as = shape_of(e, a), cs = shape_of(e, c);
  if (as == cs) return bind(e, n, add(e.b, a, c));
  // A bias: the smaller operand broadcast over the larger one's leading axes.
  const bool c_small = numel(cs) <= numel(as);
  const ValueId big = c_small ? a : c, small = c_small ? c : a;
  const Shape t = trailing_of(shape_of(e, big), shape_of(e, small));
  if (t.empty())
    refuse(e.f, n, "adds " + shape_str(as) + " and " + shape_str(cs) + ": memfit adds equal shapes, or one "
                   "broadcast over the other's leading axes");
  const ValueId s = t == shape_of(e, small) ? small : reshape(e.b, small, t);
  bind(e, n, add_broadcast(e.b, big, s));
}

// Mul and Div by a scalar constant: memfit's scale. A product of two
// tensors has no memfit op.
void op_scale(Env& e, const onnx::NodeProto& n) {
  if (fold_int(e, n)) return;
  const bool div = n.op_type() == "Div";
  int k = is_const(e, n.input(1)) ? 1 : !div && is_const(e, n.input(0)) ? 0 : -1;
  if (k < 0)
    refuse(e.f, n, "multiplies two tensors: memfit has no element-wise product; only a product with a scalar "
                   "constant (or the exact GELU pattern) is imported");
  double s = const_scalar(e, n, k);
  if (div) {
    if (s == 0) refuse(e.f, n, "divides by zero");
    s = 1.0 / s;
  }
  const ValueId x = value(e, n, 1 - k);
  bind(e, n, e.b.g.add1("scale", {x}, {{"alpha", s}}, layer_of(e, n)));
}

Shape flatten_shape(Env& e, const onnx::NodeProto& n, const Shape s) {
  const int64_t axis = axis_in(e, n, attr_i(n, "axis", 1), s.size() + 1);  // axis = rank is allowed
  int64_t lead = 1, rest = 1;
  for (size_t k = 0; k < s.size(); ++k) (static_cast<int64_t>(k) < axis ? lead : rest) *= s[k];
  return {lead, rest};
}
void op_flatten(Env& e, const onnx::NodeProto& n) {
  const ValueId x = value(e, n, 0);
  bind(e, n, reshape(e.b, x, flatten_shape(e, n, shape_of(e, x))));
}

// Reshape to a constant shape: 0 keeps the axis, -1 takes the rest. A first
// entry equal to the batch the file was exported with is memfit's batch (a
// traced x.view(16, -1)).
void op_reshape(Env& e, const onnx::NodeProto& n) {
  if (attr_i(n, "allowzero", 0) != 0) refuse(e.f, n, "attribute allowzero=1 is not supported");
  const ValueId x = value(e, n, 0);
  const Shape xs = shape_of(e, x);
  Shape to = const_ints(e, n, 1);
  const int64_t exported_batch = e.f.input_dims.empty() ? -1 : e.f.input_dims[0];
  if (!to.empty() && exported_batch > 0 && to[0] == exported_batch && !xs.empty() && xs[0] == e.batch) to[0] = e.batch;
  int64_t known = 1, infer = -1;
  for (size_t k = 0; k < to.size(); ++k) {
    if (to[k] == 0) {
      if (k >= xs.size()) refuse(e.f, n, "shape entry 0 at axis " + std::to_string(k) + " past the input's rank");
      to[k] = xs[k];
    }
    if (to[k] == -1) {
      if (infer >= 0) refuse(e.f, n, "shape " + shape_str(to) + " has two -1 entries");
      infer = static_cast<int64_t>(k);
    } else if (to[k] < 1) {
      refuse(e.f, n, "shape entry " + std::to_string(to[k]) + " is not a size");
    } else {
      known *= to[k];
    }
  }
  if (infer >= 0) to[static_cast<size_t>(infer)] = known > 0 ? numel(xs) / known : 0;
  if (numel(to) != numel(xs)) refuse(e.f, n, "cannot reshape " + shape_str(xs) + " to " + shape_str(to));
  bind(e, n, reshape(e.b, x, to));
}

void op_transpose(Env& e, const onnx::NodeProto& n) {
  const ValueId x = value(e, n, 0);
  const size_t r = shape_of(e, x).size();
  Shape perm;
  for (size_t k = r; k-- > 0;) perm.push_back(static_cast<int64_t>(k));  // default: reversed
  bind(e, n, permute(e.b, x, attr_ints(n, "perm", perm)));
}

void op_concat(Env& e, const onnx::NodeProto& n) {
  bool all_const = true;
  for (int k = 0; k < n.input_size(); ++k) all_const = all_const && is_const(e, n.input(k));
  if (all_const) {  // a shape being assembled
    Const r;
    for (int k = 0; k < n.input_size(); ++k)
      for (int64_t v : const_ints(e, n, k)) r.i.push_back(v);
    r.dims = {static_cast<int64_t>(r.i.size())};
    return bind_const(e, n, std::move(r));
  }
  std::vector<ValueId> xs;
  for (int k = 0; k < n.input_size(); ++k) xs.push_back(value(e, n, k));
  bind(e, n, concat(e.b, xs, axis_in(e, n, attr_i(n, "axis", 0), shape_of(e, xs[0]).size())));
}

void op_split(Env& e, const onnx::NodeProto& n) {
  const ValueId x = value(e, n, 0);
  const Shape xs = shape_of(e, x);
  const int64_t axis = axis_in(e, n, attr_i(n, "axis", 0), xs.size());
  Shape sizes = has_input(n, 1) ? const_ints(e, n, 1) : attr_ints(n, "split", {});
  if (sizes.empty()) {
    const int64_t parts = n.output_size();
    if (xs[static_cast<size_t>(axis)] % parts) refuse(e.f, n, "axis " + std::to_string(axis) + " does not split evenly");
    sizes.assign(static_cast<size_t>(parts), xs[static_cast<size_t>(axis)] / parts);
  }
  if (static_cast<int>(sizes.size()) != n.output_size()) refuse(e.f, n, "split sizes do not match its outputs");
  int64_t start = 0;
  for (int k = 0; k < n.output_size(); ++k) {
    bind(e, n, slice(e.b, x, axis, start, sizes[static_cast<size_t>(k)]), k);
    start += sizes[static_cast<size_t>(k)];
  }
  if (start != xs[static_cast<size_t>(axis)]) refuse(e.f, n, "split sizes do not add up to the axis");
}

// Slice with constant starts, ends, axes and steps 1; clamped as ONNX does.
void op_slice(Env& e, const onnx::NodeProto& n) {
  const bool on_const = is_const(e, n.input(0));
  const Shape xs = on_const ? Shape{constant(e, n, 0).size()} : shape_of(e, value(e, n, 0));
  const Shape starts = has_input(n, 1) ? const_ints(e, n, 1) : attr_ints(n, "starts", {});
  const Shape ends = has_input(n, 2) ? const_ints(e, n, 2) : attr_ints(n, "ends", {});
  Shape axes = has_input(n, 3) ? const_ints(e, n, 3) : attr_ints(n, "axes", {});
  const Shape steps = has_input(n, 4) ? const_ints(e, n, 4) : Shape{};
  if (axes.empty())
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  if (starts.size() != ends.size() || axes.size() != starts.size()) refuse(e.f, n, "starts, ends and axes differ in length");
  for (int64_t s : steps)
    if (s != 1) refuse(e.f, n, "step " + std::to_string(s) + " is not supported (1 only)");
  std::vector<int64_t> from(xs.size(), 0), len(xs.begin(), xs.end());
  for (size_t k = 0; k < axes.size(); ++k) {
    const auto a = static_cast<size_t>(axis_in(e, n, axes[k], xs.size()));
    auto clampi = [&](int64_t v) { return std::clamp(v < 0 ? v + xs[a] : v, int64_t(0), xs[a]); };
    from[a] = clampi(starts[k]);
    len[a] = std::max<int64_t>(0, clampi(ends[k]) - from[a]);
    if (len[a] == 0) refuse(e.f, n, "the slice of axis " + std::to_string(a) + " is empty");
  }
  if (on_const) {
    const std::vector<int64_t> v = const_ints(e, n, 0);
    Const r;
    r.i.assign(v.begin() + from[0], v.begin() + from[0] + len[0]);
    r.dims = {len[0]};
    return bind_const(e, n, std::move(r));
  }
  ValueId y = value(e, n, 0);
  for (size_t a = 0; a < xs.size(); ++a)
    if (from[a] != 0 || len[a] != xs[a]) y = slice(e.b, y, static_cast<int64_t>(a), from[a], len[a]);
  bind(e, n, y);
}

void op_softmax(Env& e, const onnx::NodeProto& n) {
  const ValueId x = value(e, n, 0);
  const size_t r = shape_of(e, x).size();
  // Before opset 13 the axis flattened the trailing axes; both agree on the last one.
  if (axis_in(e, n, attr_i(n, "axis", e.f.opset >= 13 ? -1 : 1), r) != static_cast<int64_t>(r) - 1)
    refuse(e.f, n, "softmax over axis " + std::to_string(attr_i(n, "axis", -1)) + ": memfit takes the last axis only");
  bind(e, n, softmax(e.b, x));
}

void op_dropout(Env& e, const onnx::NodeProto& n) {
  const double p = has_input(n, 1) ? const_scalar(e, n, 1) : attr_f(n, "ratio", 0.5);
  const bool train = has_input(n, 2) ? const_scalar(e, n, 2) != 0 : false;
  if (!(p >= 0 && p < 1)) refuse(e.f, n, "ratio " + std::to_string(p) + " is outside [0, 1)");
  const ValueId x = value(e, n, 0);
  bind(e, n, train ? dropout(e.b, x, p, layer_of(e, n)) : x);
}

// Gather from a float table by token ids: an embedding (the table a
// parameter). On constants: a shape's entries.
void op_gather(Env& e, const onnx::NodeProto& n) {
  if (is_const(e, n.input(0)) && is_const(e, n.input(1)) && !constant(e, n, 0).is_float) {
    const std::vector<int64_t> v = const_ints(e, n, 0), idx = const_ints(e, n, 1);
    Const r;
    for (int64_t i : idx) {
      if (i < -static_cast<int64_t>(v.size()) || i >= static_cast<int64_t>(v.size())) refuse(e.f, n, "index out of range");
      r.i.push_back(v[static_cast<size_t>(i < 0 ? i + static_cast<int64_t>(v.size()) : i)]);
    }
    r.dims = constant(e, n, 1).dims;
    return bind_const(e, n, std::move(r));
  }
  if (attr_i(n, "axis", 0) != 0) refuse(e.f, n, "gathers along axis " + std::to_string(attr_i(n, "axis", 0)) + ": memfit gathers table rows only (an embedding)");
  const ValueId table = value(e, n, 0);
  const ValueId ids = value(e, n, 1);
  if (e.b.g.value(ids).dtype != DType::i32 || shape_of(e, table).size() != 2)
    refuse(e.f, n, "memfit gathers rows of a [vocab, dim] table by token ids only (an embedding)");
  bind(e, n, e.b.g.add1("embedding", {ids, table}, {{"dtype", int64_t(DType::f32)}}, layer_of(e, n)));
}

void op_identity(Env& e, const onnx::NodeProto& n) {
  if (is_const(e, n.input(0))) return bind_const(e, n, constant(e, n, 0));
  bind(e, n, value(e, n, 0));
}

void op_constant(Env& e, const onnx::NodeProto& n) {
  if (const auto* a = attr(n, "value")) return bind_const(e, n, read_tensor(e.f, a->t(), "node '" + n.name() + "''s value"));
  Const c;
  if (const auto* a = attr(n, "value_float")) {
    c.is_float = true;
    c.f = std::make_shared<std::vector<float>>(1, a->f());
  } else if (const auto* a = attr(n, "value_floats")) {
    c.is_float = true;
    c.f = std::make_shared<std::vector<float>>(a->floats().begin(), a->floats().end());
    c.dims = {c.size()};
  } else if (const auto* a = attr(n, "value_int")) {
    c.i = {a->i()};
  } else if (const auto* a = attr(n, "value_ints")) {
    c.i.assign(a->ints().begin(), a->ints().end());
    c.dims = {c.size()};
  } else {
    refuse(e.f, n, "memfit reads a Constant's value, value_float(s) or value_int(s) only");
  }
  bind_const(e, n, std::move(c));
}

// Shapes are static in memfit: Shape gives a constant.
void op_shape(Env& e, const onnx::NodeProto& n) {
  const Shape s = is_const(e, n.input(0)) ? constant(e, n, 0).dims : shape_of(e, value(e, n, 0));
  const auto r = static_cast<int64_t>(s.size());
  int64_t lo = attr_i(n, "start", 0), hi = attr_i(n, "end", r);
  lo = std::clamp(lo < 0 ? lo + r : lo, int64_t(0), r);
  hi = std::clamp(hi < 0 ? hi + r : hi, int64_t(0), r);
  Const c;
  c.i.assign(s.begin() + lo, s.begin() + std::max(lo, hi));
  c.dims = {c.size()};
  bind_const(e, n, std::move(c));
}

// Pad of zero width: torch puts one before every avg_pool2d. memfit pads
// inside convolutions and pools only, so any other Pad is refused.
void op_pad(Env& e, const onnx::NodeProto& n) {
  const Shape pads = has_input(n, 1) ? const_ints(e, n, 1) : attr_ints(n, "pads", {});
  for (int64_t p : pads)
    if (p != 0) refuse(e.f, n, "pads " + shape_str(pads) + ": memfit pads inside Conv and pooling only (give the padding to them)");
  bind(e, n, value(e, n, 0));
}

// Unsqueeze and Squeeze: a reshape (or a constant's new dims).
void op_squeeze(Env& e, const onnx::NodeProto& n) {
  const bool unsq = n.op_type() == "Unsqueeze";
  const bool on_const = is_const(e, n.input(0));
  Shape s = on_const ? constant(e, n, 0).dims : shape_of(e, value(e, n, 0));
  Shape axes = has_input(n, 1) ? const_ints(e, n, 1) : attr_ints(n, "axes", {});
  const size_t rank = unsq ? s.size() + axes.size() : s.size();
  for (int64_t& a : axes) a = axis_in(e, n, a, rank);
  std::sort(axes.begin(), axes.end());
  if (unsq) {
    for (int64_t a : axes) s.insert(s.begin() + a, 1);
  } else if (axes.empty()) {
    std::erase(s, 1);
  } else {
    for (size_t k = axes.size(); k-- > 0;) {
      if (s[static_cast<size_t>(axes[k])] != 1) refuse(e.f, n, "squeezes axis " + std::to_string(axes[k]) + ", which is not 1");
      s.erase(s.begin() + axes[k]);
    }
  }
  if (on_const) {
    Const c = constant(e, n, 0);
    c.dims = s;
    return bind_const(e, n, std::move(c));
  }
  bind(e, n, reshape(e.b, value(e, n, 0), s));
}

// Cast of a shape computation (torch casts sizes to int64 and back).
void op_cast(Env& e, const onnx::NodeProto& n) {
  if (!is_const(e, n.input(0)))
    refuse(e.f, n, "casts a tensor of the graph: memfit's types follow its precision policy (--precision), not the file");
  const int64_t to = attr_i(n, "to", 0);
  Const c = constant(e, n, 0);
  const bool want_float = to == onnx::TensorProto::FLOAT || to == onnx::TensorProto::DOUBLE;
  if (want_float && !c.is_float) {
    c.f = std::make_shared<std::vector<float>>(c.i.begin(), c.i.end());
    c.is_float = true;
  } else if (!want_float && c.is_float) {
    c.i.assign(c.f->begin(), c.f->end());
    c.is_float = false;
  }
  bind_const(e, n, std::move(c));
}

// The op table: the ops memfit imports and each one's attributes (any other
// attribute is refused by name, so a setting memfit would ignore cannot pass).
struct OpRule {
  Handler fn;
  std::set<std::string> attrs;
};
const std::map<std::string, OpRule>& op_rules() {
  static const std::map<std::string, OpRule> r{
      {"Conv", {op_conv, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}}},
      {"Gemm", {op_gemm, {"alpha", "beta", "transA", "transB"}}},
      {"MatMul", {op_matmul, {}}},
      {"Relu", {op_relu, {}}},
      {"Gelu", {op_gelu, {"approximate"}}},
      {"MaxPool", {op_maxpool, {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"}}},
      {"AveragePool", {op_avgpool, {"auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides"}}},
      {"GlobalAveragePool", {op_global_avg_pool, {}}},
      {"BatchNormalization", {op_batchnorm, {"epsilon", "momentum", "training_mode"}}},
      {"LayerNormalization", {op_layernorm, {"axis", "epsilon", "stash_type"}}},
      {"Add", {op_add, {}}},
      {"Mul", {op_scale, {}}},
      {"Div", {op_scale, {}}},
      {"Flatten", {op_flatten, {"axis"}}},
      {"Reshape", {op_reshape, {"allowzero"}}},
      {"Transpose", {op_transpose, {"perm"}}},
      {"Concat", {op_concat, {"axis"}}},
      {"Split", {op_split, {"axis", "split", "num_outputs"}}},
      {"Slice", {op_slice, {"starts", "ends", "axes"}}},
      {"Softmax", {op_softmax, {"axis"}}},
      {"Dropout", {op_dropout, {"ratio", "seed"}}},  // seed: memfit's masks come from its own counter-based generator
      {"Gather", {op_gather, {"axis"}}},
      {"Identity", {op_identity, {}}},
      {"Constant", {op_constant, {"value", "value_float", "value_floats", "value_int", "value_ints"}}},
      {"Pad", {op_pad, {"mode", "pads"}}},
      {"Shape", {op_shape, {"start", "end"}}},
      {"Unsqueeze", {op_squeeze, {"axes"}}},
      {"Squeeze", {op_squeeze, {"axes"}}},
      {"Cast", {op_cast, {"to"}}},
      {"Erf", {nullptr, {}}},  // inside the exact GELU only (find_gelu)
  };
  return r;
}

int64_t default_opset(const onnx::ModelProto& m) {
  for (const auto& o : m.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") return o.version();
  return 0;
}

// ------------------------------------------------------------- patterns ----

// Finds x * 0.5 * (1 + Erf(x / sqrt 2)) in either association torch and
// Hugging Face export ((x * (1 + erf)) * 0.5 or (x * 0.5) * (1 + erf)), each
// intermediate read by the pattern alone, and records it as one gelu.
void find_gelu(OnnxFile& f, const std::map<std::string, double>& scalars) {
  const auto& nodes = f.graph.node();
  std::map<std::string, int> producer;
  std::map<std::string, std::vector<int>> readers;
  for (int k = 0; k < nodes.size(); ++k) {
    for (const auto& o : nodes[k].output()) producer[o] = k;
    for (const auto& i : nodes[k].input()) readers[i].push_back(k);
  }
  auto scalar_is = [&](const std::string& name, double want) {
    auto it = scalars.find(name);
    return it != scalars.end() && std::abs(it->second - want) <= 1e-6 * std::abs(want);
  };
  // The node reading v, if it is the only one and of this op; else -1.
  auto only_reader = [&](const std::string& v, const char* op) {
    auto it = readers.find(v);
    return it != readers.end() && it->second.size() == 1 && nodes[it->second[0]].op_type() == op ? it->second[0] : -1;
  };
  auto other = [&](int n, const std::string& v) {
    return nodes[n].input(0) == v ? nodes[n].input(1) : nodes[n].input(0);
  };
  auto binary = [&](int n) { return n >= 0 && nodes[n].input_size() == 2; };
  for (int k = 0; k < nodes.size(); ++k) {
    if (nodes[k].op_type() != "Erf" || nodes[k].input_size() != 1 || !producer.count(nodes[k].input(0))) continue;
    const int div = producer[nodes[k].input(0)];
    if (!binary(div) || readers[nodes[div].output(0)].size() != 1) continue;
    const auto& d = nodes[div];
    std::string x;
    if (d.op_type() == "Div" && scalar_is(d.input(1), std::sqrt(2.0))) x = d.input(0);
    else if (d.op_type() == "Mul" && scalar_is(d.input(1), std::sqrt(0.5))) x = d.input(0);
    else if (d.op_type() == "Mul" && scalar_is(d.input(0), std::sqrt(0.5))) x = d.input(1);
    if (x.empty()) continue;
    const int plus = only_reader(nodes[k].output(0), "Add");
    if (!binary(plus) || !scalar_is(other(plus, nodes[k].output(0)), 1.0)) continue;
    const int mul = only_reader(nodes[plus].output(0), "Mul");
    if (!binary(mul)) continue;
    const std::string m = other(mul, nodes[plus].output(0));
    std::vector<int> parts{div, k, plus};
    int last = -1;
    if (m == x) {  // (x * (1 + erf)) * 0.5
      last = only_reader(nodes[mul].output(0), "Mul");
      if (!binary(last) || !scalar_is(other(last, nodes[mul].output(0)), 0.5)) continue;
      parts.push_back(mul);
    } else if (producer.count(m)) {  // (x * 0.5) * (1 + erf)
      const int half = producer[m];
      if (!binary(half) || nodes[half].op_type() != "Mul" || readers[m].size() != 1 ||
          (nodes[half].input(0) != x && nodes[half].input(1) != x) || !scalar_is(other(half, x), 0.5))
        continue;
      parts.push_back(half);
      last = mul;
    } else {
      continue;
    }
    f.gelu_at[static_cast<size_t>(last)] = x;
    for (int p : parts) f.fused.insert(static_cast<size_t>(p));
  }
}

// ------------------------------------------------------------------ run ----

// Replays the file's nodes onto the builder; returns the output's value.
ValueId convert(const OnnxFile& f, Builder& b, ValueId x) {
  Env e{f, b, {}, {}, {}, b.g.value(x).shape.at(0)};
  e.values[f.input] = x;
  std::set<std::string> used;
  for (const auto& n : f.graph.node())
    for (const auto& i : n.input()) used.insert(i);
  for (const auto& o : f.graph.output()) used.insert(o.name());
  const auto& nodes = f.graph.node();
  for (int k = 0; k < nodes.size(); ++k) {
    const onnx::NodeProto& n = nodes[k];
    if (f.fused.count(static_cast<size_t>(k))) continue;
    try {
      if (auto g = f.gelu_at.find(static_cast<size_t>(k)); g != f.gelu_at.end()) {
        auto it = e.values.find(g->second);
        if (it == e.values.end()) refuse(f, n, "the GELU's input '" + g->second + "' is not a tensor of the graph");
        bind(e, n, gelu(b, it->second, false));
        continue;
      }
      if (n.op_type() == "Erf") refuse(f, n, "Erf is imported only inside the exact GELU, x * 0.5 * (1 + Erf(x / sqrt(2)))");
      first_output_only(e, n, used);
      op_rules().at(n.op_type()).fn(e, n);
    } catch (const GraphError& err) {
      refuse(f, n, err.what());
    }
  }
  auto out = e.values.find(f.output);
  if (out == e.values.end()) file_error(f, "its output '" + f.output + "' is not a tensor the graph computes");
  return out->second;
}

// Checks made once, on the file: one default-domain opset, every node's op
// and attributes known, one data input, one output.
void check_file(OnnxFile& f, const onnx::ModelProto& m) {
  if (default_opset(m) == 0) file_error(f, "imports no default ONNX opset (not a model torch.onnx.export wrote?)");
  for (const auto& n : f.graph.node()) {
    if (!n.domain().empty() && n.domain() != "ai.onnx")
      refuse(f, n, "is an op of domain '" + n.domain() + "', which memfit does not import (supported: " +
                       onnx_supported_ops() + ")");
    auto rule = op_rules().find(n.op_type());
    if (rule == op_rules().end())
      refuse(f, n, "memfit cannot train op " + n.op_type() + " (supported: " + onnx_supported_ops() + ")");
    for (const auto& a : n.attribute())
      if (!rule->second.attrs.count(a.name()))
        refuse(f, n, "attribute '" + a.name() + "' of " + n.op_type() + " is not supported");
  }
  std::vector<const onnx::ValueInfoProto*> inputs;
  for (const auto& i : f.graph.input())
    if (!f.initializers.count(i.name())) inputs.push_back(&i);
  if (inputs.size() != 1)
    file_error(f, "has " + std::to_string(inputs.size()) + " data inputs: memfit imports models of one input (an "
                  "image [N, C, H, W] or token ids [N, T])");
  if (f.graph.output_size() != 1)
    file_error(f, "has " + std::to_string(f.graph.output_size()) + " outputs: memfit imports models of one (the logits)");
  const auto& type = inputs[0]->type().tensor_type();
  f.input = inputs[0]->name();
  f.output = f.graph.output(0).name();
  for (const auto& d : type.shape().dim()) f.input_dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
  const int32_t et = type.elem_type();
  f.tokens = et == onnx::TensorProto::INT64 || et == onnx::TensorProto::INT32;
  if (f.tokens ? f.input_dims.size() != 2 : (et != onnx::TensorProto::FLOAT || f.input_dims.size() != 4))
    file_error(f, "its input '" + f.input + "' is not an image f32 [N, C, H, W] nor token ids [N, T]");
}

std::shared_ptr<const OnnxFile> read_file(const std::string& path) {
  auto f = std::make_shared<OnnxFile>();
  f->path = path;
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) throw ModelFileError("cannot read ONNX model " + path + ": not found");
  if (!std::filesystem::is_regular_file(st)) throw ModelFileError(path + ": not a regular file");
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec || size > kMaxFileBytes)
    file_error(*f, "is over 2 GiB, the most one protobuf message holds: export with its weights in the file");
  std::string bytes(static_cast<size_t>(size), '\0');
  std::ifstream in(path, std::ios::binary);
  if (!in.read(bytes.data(), static_cast<std::streamsize>(bytes.size())))
    throw ModelFileError("cannot read ONNX model " + path);
  onnx::ModelProto m;
  if (!m.ParseFromString(bytes))
    file_error(*f, "is not a readable ONNX model (truncated or corrupt protobuf): export it again with torch.onnx.export");
  bytes = {};
  if (!m.has_graph() || m.graph().node_size() == 0) file_error(*f, "holds no graph (truncated, or not an ONNX model)");
  f->opset = default_opset(m);
  for (const auto& t : m.graph().initializer())
    f->initializers[t.name()] = read_tensor(*f, t, "initializer '" + t.name() + "'");
  f->graph.Swap(m.mutable_graph());
  f->graph.clear_initializer();  // their values live in `initializers` now
  check_file(*f, m);
  std::map<std::string, double> scalars;  // single-number constants, for the patterns
  for (const auto& [name, c] : f->initializers)
    if (c.size() == 1) scalars[name] = c.is_float ? (*c.f)[0] : static_cast<double>(c.i[0]);
  for (const auto& n : f->graph.node())
    if (n.op_type() == "Constant" && n.output_size() == 1)
      if (const auto* a = attr(n, "value"); a && a->t().dims_size() == 0) {
        const Const c = read_tensor(*f, a->t(), "node '" + n.name() + "''s value");
        if (c.size() == 1) scalars[n.output(0)] = c.is_float ? (*c.f)[0] : static_cast<double>(c.i[0]);
      }
  find_gelu(*f, scalars);
  // The whole graph is converted once now, at the file's own input size
  // (batch 1 where its batch axis is dynamic), so that every refusal comes
  // before training.
  Shape dims = f->input_dims;
  if (dims[0] < 1) dims[0] = 1;
  if (std::all_of(dims.begin(), dims.end(), [](int64_t d) { return d >= 1; })) {
    Graph g;
    Builder b(g, true);
    const ValueId x = g.input(f->input, dims, f->tokens ? DType::i32 : DType::f32);
    f->out_rank = static_cast<int64_t>(g.value(convert(*f, b, x)).shape.size());
  } else {
    f->out_rank = f->graph.output(0).type().tensor_type().shape().dim_size();
  }
  return f;
}

// One parse per file while a model or graph holds it: every step graph
// (training, evaluation, each one the budget search tries) resolves the
// model again, and they share one copy of the initial weights, which the
// run's measured baseline then counts once.
std::shared_ptr<const OnnxFile> read_shared(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<const OnnxFile>> files;
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  const auto time = std::filesystem::last_write_time(path, ec);
  const std::string key = path + "\n" + std::to_string(size) + "\n" + std::to_string(time.time_since_epoch().count());
  std::lock_guard<std::mutex> lock(mu);
  if (auto f = files[key].lock()) return f;
  auto f = read_file(path);
  files[key] = f;
  return f;
}

}  // namespace

bool is_onnx_path(const std::string& path) {
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".onnx") == 0;
}

std::string onnx_supported_ops() {
  std::string s;
  for (const auto& [op, rule] : op_rules())
    if (op != "Erf") s += (s.empty() ? "" : ", ") + op;
  return s + "; Erf inside the exact GELU";
}

Model load_onnx_model(const std::string& path) {
  std::shared_ptr<const OnnxFile> f = read_shared(path);
  const int64_t out_rank = f->out_rank;
  Model m;
  m.name = path;
  const bool lm = f->tokens && out_rank == 3;
  if (f->tokens) {
    m.inputs = {{"tokens", DType::i32, 1, "[T]"}};
    m.target = lm ? InputDecl{"targets", DType::i32, 1, "[T]"} : InputDecl{"labels", DType::i32, 0, "[]"};
    m.task = lm ? Task::LanguageModel : Task::Classification;
    if (f->input_dims[1] > 0) m.max_sequence = f->input_dims[1];
  } else {
    m.inputs = {{"image", DType::f32, 3, "[C,H,W]"}};
    m.target = {"labels", DType::i32, 0, "[]"};
    m.task = Task::Classification;
  }
  m.build = [f, lm](Builder& b, const Inputs& in, int64_t classes) {
    const ValueId x = in.at(f->tokens ? "tokens" : "image");
    const Shape xs = b.g.value(x).shape;
    for (size_t k = 1; k < xs.size(); ++k)
      if (f->input_dims[k] > 0 && f->input_dims[k] != xs[k])
        throw GraphError(f->path + " takes " + f->input + " " + shape_str(f->input_dims) + " (-1: any), but the data holds " +
                         shape_str(xs) + ": resize the data, or export the model for this size");
    const ValueId y = convert(*f, b, x);
    const Shape ys = b.g.value(y).shape;
    const size_t want = lm ? 3 : 2;
    if (ys.size() != want || ys[0] != xs[0])
      throw GraphError(f->path + ": its output '" + f->output + "' is " + shape_str(ys) + ", not the logits " +
                       (lm ? "[N, T, vocab]" : "[N, classes]"));
    if (ys.back() != classes)
      throw GraphError(f->path + " predicts " + std::to_string(ys.back()) + (lm ? " tokens" : " classes") +
                       " but the data has " + std::to_string(classes) + ": export the model with a head of " +
                       std::to_string(classes));
    return y;
  };
  return m;
}

}  // namespace memfit::models
