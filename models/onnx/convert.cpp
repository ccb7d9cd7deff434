// ONNX nodes as memfit ops (models/onnx/import.hpp): the converter's
// shared helpers, the op table (op_rules: one handler per ONNX op with the
// attributes it accepts) and the replay of a file's nodes (convert). The
// handlers live by kind: ops_nn.cpp (layers), ops_arith.cpp (elementwise
// arithmetic and constant folding), ops_shape.cpp (shapes, indexing,
// casts), ops_recurrent.cpp (RNN, GRU, LSTM), ops_fused.cpp (the patterns
// patterns.cpp finds, emitted as memfit's fused ops).
//
// While converting, a name is either a graph value (an activation or a
// parameter) or a constant known at import time: a Constant node, an
// integer initializer, or a shape computed from memfit's static shapes
// (Shape -> Gather -> Concat -> Reshape, as torch exports x.view(x.size(0),
// -1)). Constants feed shapes, axes and scalar factors only; memfit has no
// op that reads a constant tensor.
#include <algorithm>
#include <cmath>
#include <limits>

#include "models/onnx/convert.hpp"

namespace memfit::models::onnx_import {

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
bool is_const(Env& e, const std::string& name) {
  return e.consts.count(name) || (!e.values.count(name) && e.f.initializers.count(name) && !e.f.recurrent_weights.count(name));
}

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
ValueId value_named(Env& e, const onnx::NodeProto& n, const std::string& name, bool buffer) {
  if (e.pending_pads.count(name) && n.op_type() != "AveragePool")
    refuse(e.f, n, "reads '" + name + "', a Pad's output: memfit pads inside Conv and pooling only (a Pad is taken "
                   "by the AveragePool that reads it)");
  if (auto it = e.values.find(name); it != e.values.end()) return it->second;
  if (e.tainted.count(name))
    refuse(e.f, n, "reads '" + name + "', computed from attention_mask, as a tensor: memfit reads the mask as an "
                   "attention's padding mask only");
  if (auto c = e.consts.find(name); c != e.consts.end() && c->second.is_float && c->second.size() > 1) {
    // A tensor the file computes from constants (Swin's shifted-window
    // mask, added to the scores): a constant buffer of the graph.
    const ValueId v = e.b.g.buffer("constant:" + name, const_dims(c->second));
    Value& val = e.b.g.value(v);
    val.init = InitSpec{InitSpec::Given, 0, c->second.f};
    val.constant = true;
    return e.values[name] = v;
  }
  auto init = e.f.initializers.find(name);
  if (init == e.f.initializers.end() || !init->second.is_float) {
    if (e.consts.count(name) || init != e.f.initializers.end())
      refuse(e.f, n, "reads the constant '" + name + "' as a tensor: memfit takes constants as shapes, axes and "
                     "scalar factors only");
    refuse(e.f, n, "reads '" + name + "', which no earlier node makes (a truncated or unsorted graph)");
  }
  const Const& c = init->second;
  if (!buffer && e.f.buffers.count(name)) {
    // A buffer of the module read as a tensor: a constant of the graph,
    // never trained nor saved (the module has it).
    const ValueId v = e.b.g.buffer("constant:" + name, c.dims);
    Value& val = e.b.g.value(v);
    val.init = InitSpec{InitSpec::Given, 0, c.f};
    val.constant = true;
    return e.values[name] = v;
  }
  ValueId v = buffer ? e.b.g.buffer(name, c.dims) : e.b.g.param(name, c.dims);
  e.b.g.value(v).init = InitSpec{InitSpec::Given, 0, c.f};
  if (!buffer && c.dims.size() < 2) no_weight_decay(e.b, v);
  return e.values[name] = v;
}
ValueId value(Env& e, const onnx::NodeProto& n, int k, bool buffer) { return value_named(e, n, n.input(k), buffer); }

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

void bind(Env& e, const onnx::NodeProto& n, ValueId v, int k) { e.values[n.output(k)] = v; }
void bind_const(Env& e, const onnx::NodeProto& n, Const c, int k) { e.consts[n.output(k)] = std::move(c); }

// Outputs past the first must be unused (a pool's indices, dropout's mask,
// batch-norm's updated statistics: memfit keeps those itself).
void first_output_only(Env& e, const onnx::NodeProto& n, const std::set<std::string>& used) {
  const std::string& op = n.op_type();
  if (op == "Split" || op == "RNN" || op == "GRU" || op == "LSTM") return;  // give them all
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

// An attribute with one value per spatial axis (pads: two) has that many.
void check_axes(Env& e, const onnx::NodeProto& n, const std::string& name, size_t count) {
  const auto* a = attr(n, name);
  if (a && static_cast<size_t>(a->ints_size()) != count)
    refuse(e.f, n, "attribute " + name + " " + shape_str(attr_ints(n, name, {})) + " has " +
                   std::to_string(a->ints_size()) + " values; " + std::to_string(count) + " expected");
}

// dims: 1 or 2 spatial axes; in: the input's spatial sizes; kernel: its
// kernel's. Pads are ONNX's [begin..., end...]: memfit pads both sides of
// an axis alike, so begin = end; auto_pad SAME_UPPER/SAME_LOWER is the
// padding that keeps ceil(in / stride) outputs, where it splits evenly.
Spatial spatial(Env& e, const onnx::NodeProto& n, const Shape& in, const Shape& kernel) {
  const size_t d = in.size();
  for (const char* name : {"strides", "dilations", "pads", "kernel_shape"})
    check_axes(e, n, name, std::string(name) == "pads" ? 2 * d : d);
  const Shape ones(d, 1);
  const Shape stride = attr_ints(n, "strides", ones), dilation = attr_ints(n, "dilations", ones);
  Shape pads = attr_ints(n, "pads", Shape(2 * d, 0));
  const std::string a = attr_s(n, "auto_pad", "NOTSET");
  if (a == "SAME_UPPER" || a == "SAME_LOWER") {
    if (attr(n, "pads")) refuse(e.f, n, "auto_pad=" + a + " with pads");
    for (size_t i = 0; i < d; ++i) {
      if (stride[i] < 1) refuse(e.f, n, "stride " + std::to_string(stride[i]));
      const int64_t out = (in[i] + stride[i] - 1) / stride[i];
      const int64_t total = std::max<int64_t>((out - 1) * stride[i] + (kernel[i] - 1) * dilation[i] + 1 - in[i], 0);
      if (total % 2)
        refuse(e.f, n, "auto_pad=" + a + " pads axis " + std::to_string(i) + " by " + std::to_string(total) +
                       " (one side more than the other); memfit pads both sides alike");
      pads[i] = pads[i + d] = total / 2;
    }
  } else if (a == "VALID") {
    if (std::any_of(pads.begin(), pads.end(), [](int64_t p) { return p != 0; }))
      refuse(e.f, n, "auto_pad=VALID with nonzero pads");
  } else if (a != "NOTSET" && !a.empty()) {
    refuse(e.f, n, "attribute auto_pad=" + a + " (NOTSET, VALID, SAME_UPPER or SAME_LOWER)");
  }
  for (size_t i = 0; i < d; ++i)
    if (pads[i] != pads[i + d])
      refuse(e.f, n, "pads " + shape_str(pads) + ": memfit pads both sides of an axis alike (begin = end)");
  auto two = [&](const Shape& v, int64_t fill) { return d == 2 ? v : Shape{fill, v[0]}; };
  return {two(kernel, 1), two(stride, 1), two(Shape(pads.begin(), pads.begin() + static_cast<long>(d)), 0),
          two(dilation, 1)};
}

// x [N, C, L] as [N, C, 1, L] (a view), for the 2-d ops.
ValueId as_2d(Env& e, ValueId x) {
  const Shape& s = shape_of(e, x);
  return reshape(e.b, x, {s[0], s[1], 1, s[2]});
}
// A 2-d op's [N, C, 1, L] back to [N, C, L].
ValueId from_2d(Env& e, ValueId y) {
  const Shape& s = shape_of(e, y);
  return reshape(e.b, y, {s[0], s[1], s[3]});
}

// Whether input k is a constant a node computed (not an initializer) whose
// every element is 0: the dynamo exporter gives a convolution without a
// bias one, Expand(CastLike(0, x), [C]).
bool zero_constant(Env& e, const onnx::NodeProto& n, int k) {
  if (!has_input(n, k) || !e.consts.count(n.input(k))) return false;
  const Const& c = e.consts.at(n.input(k));
  for (int64_t j = 0; j < c.size(); ++j)
    if (const_at(c, j) != 0) return false;
  return true;
}

// The op table: the ops memfit imports and each one's attributes (any other
// attribute is refused by name, so a setting memfit would ignore cannot pass).
const std::map<std::string, OpRule>& op_rules() {
  static const std::map<std::string, OpRule> r{
      {"Conv", {op_conv, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}, 2}},
      {"Gemm", {op_gemm, {"alpha", "beta", "transA", "transB"}, 2}},
      {"MatMul", {op_matmul, {}, 2}},
      {"Relu", {op_relu, {}}},
      {"Gelu", {op_gelu, {"approximate"}}},
      {"Sigmoid", {op_activation, {}}},
      {"Tanh", {op_activation, {}}},  // also inside GELU's tanh form (patterns.cpp)
      {"HardSwish", {op_activation, {}}},
      {"HardSigmoid", {op_activation, {"alpha", "beta"}}},
      {"LeakyRelu", {op_activation, {"alpha"}}},
      {"Elu", {op_activation, {"alpha"}}},
      {"Clip", {op_clip, {"min", "max"}}},
      {"MaxPool", {op_maxpool, {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"}}},
      {"AveragePool", {op_avgpool, {"auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides"}}},
      {"GlobalAveragePool", {op_global_avg_pool, {}}},
      {"ReduceMean", {op_reduce, {"axes", "keepdims", "noop_with_empty_axes"}}},
      {"ReduceSum", {op_reduce, {"axes", "keepdims", "noop_with_empty_axes"}}},
      {"BatchNormalization", {op_batchnorm, {"epsilon", "momentum", "training_mode"}, 5}},
      {"LayerNormalization", {op_layernorm, {"axis", "epsilon", "stash_type"}}},
      {"Add", {op_add, {}, 2}},
      {"Mul", {op_scale, {}, 2}},
      {"Div", {op_scale, {}, 2}},
      {"Sub", {op_binary, {}, 2}},
      {"Mod", {op_mod, {"fmod"}, 2}},
      {"Max", {op_max_min, {}, 1}},
      {"Min", {op_max_min, {}, 1}},
      {"ScatterND", {op_scatter_nd, {"reduction"}, 3}},
      {"Flatten", {op_flatten, {"axis"}}},
      {"Reshape", {op_reshape, {"allowzero"}, 2}},
      {"Transpose", {op_transpose, {"perm"}}},
      {"Concat", {op_concat, {"axis"}}},
      {"Split", {op_split, {"axis", "split", "num_outputs"}}},
      {"Slice", {op_slice, {"starts", "ends", "axes"}}},
      {"Softmax", {op_softmax, {"axis"}}},
      {"LogSoftmax", {op_log_softmax, {"axis"}}},  // as the last node: the loss's input
      {"Dropout", {op_dropout, {"ratio", "seed"}}},  // seed: memfit's masks come from its own counter-based generator
      {"Gather", {op_gather, {"axis"}, 2}},
      {"GatherElements", {op_gather_elements, {"axis"}, 2}},
      {"GatherND", {op_gather_nd, {"batch_dims"}, 2}},
      {"SplitToSequence", {op_split_to_sequence, {"axis", "keepdims"}, 1}},
      {"SequenceAt", {op_sequence_at, {}, 2}},
      {"CastLike", {op_cast_like, {"saturate"}, 2}},
      {"Identity", {op_identity, {}}},
      {"Constant", {op_constant, {"value", "value_float", "value_floats", "value_int", "value_ints"}, 0}},
      {"Pad", {op_pad, {"mode", "pads"}}},
      {"Shape", {op_shape, {"start", "end"}}},
      {"Unsqueeze", {op_squeeze, {"axes"}}},
      {"Squeeze", {op_squeeze, {"axes"}}},
      {"Cast", {op_cast, {"to"}}},
      {"Range", {op_range, {}, 3}},
      {"Equal", {op_equal, {}, 2}},
      {"Not", {op_not, {}}},
      {"ConstantOfShape", {op_constant_of_shape, {"value"}}},
      {"Expand", {op_expand, {}, 2}},
      {"RNN", {op_recurrent, {"activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size", "layout"}, 3}},
      {"GRU", {op_recurrent, {"activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size", "layout", "linear_before_reset"}, 3}},
      {"LSTM", {op_recurrent, {"activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size", "input_forget", "layout"}, 3}},
      {"Erf", {op_pattern_only, {}}},  // inside GELU only (patterns.cpp)
      {"RandomUniformLike", {op_pattern_only, {"dtype", "high", "low", "seed"}}},  // stochastic depth only
      {"Less", {op_pattern_only, {}, 2}},
      {"Pow", {op_pow, {}, 2}},
      {"Sqrt", {op_sqrt, {}}},
      {"Exp", {op_exp, {}}},
      {"ReduceL2", {op_reduce_l2, {"axes", "keepdims", "noop_with_empty_axes"}}},
      {"Where", {op_where, {}, 3}},  // on constants; on a graph tensor as attention's mask (patterns.cpp)
  };
  return r;
}

// After node n is converted: the constants it made from a tainted one are
// tainted (a Shape of one is not: shapes are no mask values); a tensor of
// the graph made from one is refused (the mask's values are a probe).
static void taint(Env& e, const onnx::NodeProto& n) {
  bool reads = false;
  for (const auto& i : n.input()) reads = reads || e.tainted.count(i);
  if (!reads || n.op_type() == "Shape") return;
  for (const auto& o : n.output()) {
    if (o.empty()) continue;
    if (e.values.count(o))
      refuse(e.f, n, "computes a tensor from attention_mask: memfit reads the mask as an attention's padding mask only");
    if (e.consts.count(o)) e.tainted.insert(o);
  }
}

// Replays the file's nodes onto the builder; returns the output's value.
ValueId convert(const OnnxFile& f, Builder& b, ValueId x, ValueId mask) {
  if (f.released)
    file_error(f, "its weights were let go once the run's parameters held them; resolve the file again to build it");
  Env e{f, b, {}, {}, {}, b.g.value(x).shape.at(0), nullptr, {}, kNone, {}, {}, {}};
  e.values[f.input] = x;
  if (!f.mask_input.empty()) {
    // The attention_mask input as a constant (Env::mask_probe): a pattern
    // of 1s and 0s, every row's first token kept, when the data gives the
    // mask; all 1s, and no taint, when it does not (nothing is padding).
    const Shape xs = b.g.value(x).shape;
    if (mask != kNone && b.g.value(mask).shape != xs)
      file_error(f, "its attention_mask is " + shape_str(b.g.value(mask).shape) + " for tokens " + shape_str(xs));
    Const probe;
    probe.dims = xs;
    for (int64_t r = 0; r < xs[0]; ++r)
      for (int64_t t = 0; t < xs[1]; ++t) probe.i.push_back(mask == kNone || t == 0 || (r * 5 + t * 3) % 4 != 0);
    if (mask != kNone) {
      e.mask_value = mask;
      e.mask_probe = probe.i;
      e.tainted.insert(f.mask_input);
    }
    e.consts[f.mask_input] = std::move(probe);
  }
  std::set<std::string> used;
  for (const auto& n : f.graph.node())
    for (const auto& i : n.input()) used.insert(i);
  for (const auto& o : f.graph.output()) used.insert(o.name());
  e.used = &used;
  const auto& nodes = f.graph.node();
  for (int k = 0; k < nodes.size(); ++k) {
    const onnx::NodeProto& n = nodes[k];
    if (auto sh = f.scores_shape_at.find(static_cast<size_t>(k)); sh != f.scores_shape_at.end()) {
      try {
        Const c;
        c.i = scores_shape(e, n, f.attention_at.at(sh->second));
        c.dims = {4};
        bind_const(e, n, std::move(c));
      } catch (const GraphError& err) {
        refuse(f, n, err.what());
      }
      continue;
    }
    if (f.fused.count(static_cast<size_t>(k))) continue;
    try {
      const auto at = static_cast<size_t>(k);
      if (auto g = f.gelu_at.find(at); g != f.gelu_at.end()) {
        emit_gelu(e, n, g->second);
        continue;
      }
      if (auto s = f.silu_at.find(at); s != f.silu_at.end()) {
        emit_silu(e, n, s->second);
        continue;
      }
      if (auto m = f.matmul_at.find(at); m != f.matmul_at.end()) {
        emit_matmul(e, n, m->second);
        continue;
      }
      if (auto a = f.attention_at.find(at); a != f.attention_at.end()) {
        emit_attention(e, n, a->second);
        continue;
      }
      if (auto r = f.recurrent_at.find(at); r != f.recurrent_at.end()) {
        emit_recurrent(e, n, r->second);
        continue;
      }
      if (auto d = f.depth_at.find(at); d != f.depth_at.end()) {
        emit_stochastic_depth(e, n, d->second);
        continue;
      }
      first_output_only(e, n, used);
      op_rules().at(n.op_type()).fn(e, n);
      if (!e.tainted.empty()) taint(e, n);
    } catch (const GraphError& err) {
      refuse(f, n, err.what());
    }
  }
  auto out = e.values.find(f.output);
  if (out == e.values.end()) file_error(f, "its output '" + f.output + "' is not a tensor the graph computes");
  return out->second;
}

}  // namespace memfit::models::onnx_import
