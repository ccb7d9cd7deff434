// ONNX nodes as memfit ops (onnx_import.hpp): one handler per ONNX op,
// registered in op_rules() with the attributes it accepts.
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

#include "models/onnx_import.hpp"

namespace memfit::models::onnx_import {
namespace {

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

Shape const_dims(const Const& c);
bool foldable(Env& e, const std::string& name);

// The graph value of input k; an initializer becomes a parameter (a buffer
// for batch-norm statistics) under its ONNX name the first time it is read.
// Vectors (biases, norm scales and shifts) are exempt from weight decay
// when the optimizer keeps them undecayed, as the builder's layers mark them.
ValueId value_named(Env& e, const onnx::NodeProto& n, const std::string& name, bool buffer = false) {
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
ValueId value(Env& e, const onnx::NodeProto& n, int k, bool buffer = false) { return value_named(e, n, n.input(k), buffer); }

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

// The spatial attributes of a Conv or pooling node over 1 or 2 spatial
// axes, as memfit's 2-d ops take them: a 1-d node ([N, C, L]) is a 2-d one
// over [N, C, 1, L] (height 1: kernel, stride, dilation 1, pad 0).
struct Spatial {
  Shape kernel, stride, pad, dilation;  // 2 each
};

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

double const_at(const Const& c, int64_t k);

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

void op_conv(Env& e, const onnx::NodeProto& n) {
  const ValueId x = value(e, n, 0), w = value(e, n, 1);
  const Shape xs = shape_of(e, x), ws = shape_of(e, w);
  if (!((xs.size() == 4 && ws.size() == 4) || (xs.size() == 3 && ws.size() == 3)))
    refuse(e.f, n, "memfit takes 1-d and 2-d convolutions: input " + shape_str(xs) + ", weight " + shape_str(ws));
  const Shape kernel(ws.begin() + 2, ws.end());
  if (const auto* k = attr(n, "kernel_shape"); k && Shape(k->ints().begin(), k->ints().end()) != kernel)
    refuse(e.f, n, "kernel_shape does not match the weight " + shape_str(ws));
  const bool one_d = xs.size() == 3;
  const Spatial sp = spatial(e, n, Shape(xs.begin() + 2, xs.end()), kernel);
  // A 1-d convolution's weight [O, C/g, K] is read as [O, C/g, 1, K]: the
  // parameter keeps the file's name and shape.
  std::vector<ValueId> ins{one_d ? as_2d(e, x) : x, one_d ? reshape(e.b, w, {ws[0], ws[1], 1, ws[2]}) : w};
  if (has_input(n, 2) && !zero_constant(e, n, 2)) ins.push_back(value(e, n, 2));
  Attrs a{{"stride", sp.stride}, {"pad", sp.pad}, {"dilation", sp.dilation}, {"groups", attr_i(n, "group", 1)}};
  const ValueId y = e.b.g.add1("conv2d", ins, std::move(a), layer_of(e, n));
  bind(e, n, one_d ? from_2d(e, y) : y);
}

// Gemm: Y = A op(B) + C with alpha = beta = 1. A Linear (B [N, K] with
// transB, C [N]) is memfit's linear; otherwise a matmul and a broadcast add.
// Gemm: alpha * op(A) op(B) + beta * C, op a transpose where transA or
// transB says so. nn.Linear (transB, alpha = beta = 1, C its bias) is
// memfit's linear; otherwise a matmul with trans flags, scaled, and C (a
// bias [out]) scaled and added.
void op_gemm(Env& e, const onnx::NodeProto& n) {
  const bool ta = attr_i(n, "transA", 0) != 0, tb = attr_i(n, "transB", 0) != 0;
  const double alpha = attr_f(n, "alpha", 1.0), beta = attr_f(n, "beta", 1.0);
  const ValueId a = value(e, n, 0), w = value(e, n, 1);
  const std::string layer = layer_of(e, n);
  ValueId c = kNone;
  if (has_input(n, 2)) {
    c = value(e, n, 2);
    const Shape cs = shape_of(e, c);
    const int64_t out = shape_of(e, w).size() == 2 ? shape_of(e, w)[tb ? 0 : 1] : -1;
    if (cs != Shape{out}) refuse(e.f, n, "its C " + shape_str(cs) + " must be [" + std::to_string(out) + "] (a bias)");
  }
  if (tb && !ta && alpha == 1.0 && beta == 1.0) {
    std::vector<ValueId> ins{a, w};
    if (c != kNone) ins.push_back(c);
    bind(e, n, e.b.g.add1("linear", ins, {}, layer));
    return;
  }
  ValueId y = e.b.g.add1("matmul", {a, w}, {{"trans_a", int64_t(ta)}, {"trans_b", int64_t(tb)}}, layer);
  if (alpha != 1.0) y = e.b.g.add1("scale", {y}, {{"alpha", alpha}}, layer + ".alpha");
  if (c != kNone && beta != 0.0) {
    const ValueId bc = beta == 1.0 ? c : e.b.g.add1("scale", {c}, {{"alpha", beta}}, layer + ".beta");
    y = add_broadcast(e.b, y, bc);
  }
  bind(e, n, y);
}

void op_matmul(Env& e, const onnx::NodeProto& n) {
  const ValueId a = value(e, n, 0), w = value(e, n, 1);
  bind(e, n, e.b.g.add1("matmul", {a, w}, {{"trans_a", int64_t(0)}, {"trans_b", int64_t(0)}}, layer_of(e, n)));
}

void op_relu(Env& e, const onnx::NodeProto& n) { bind(e, n, relu(e.b, value(e, n, 0))); }

// The pointwise activations (memfit's op "activation"), with ONNX's defaults
// for their attributes (HardSigmoid's alpha is 0.2 in ONNX; torch writes
// 1/6 explicitly for nn.Hardsigmoid).
void op_activation(Env& e, const onnx::NodeProto& n) {
  const std::string& op = n.op_type();
  Attrs a;
  std::string kind;
  if (op == "Sigmoid") kind = "sigmoid";
  else if (op == "Tanh") kind = "tanh";
  else if (op == "HardSwish") kind = "hardswish";
  else if (op == "HardSigmoid") {
    kind = "hardsigmoid";
    a.set("alpha", attr_f(n, "alpha", 0.2));
    a.set("beta", attr_f(n, "beta", 0.5));
  } else if (op == "LeakyRelu") {
    kind = "leaky_relu";
    a.set("alpha", attr_f(n, "alpha", 0.01));
  } else if (op == "Elu") {
    kind = "elu";
    a.set("alpha", attr_f(n, "alpha", 1.0));
  } else {
    refuse(e.f, n, "is not a pointwise activation memfit knows");
  }
  bind(e, n, activation(e.b, value(e, n, 0), kind, std::move(a)));
}

// Clip(x, min, max): the bounds are inputs 1 and 2 from opset 11 (either may
// be absent), attributes before; constants either way. ReLU6 is Clip(x, 0, 6);
// Clip(x, 0) is a ReLU; no bounds at all is the identity.
void op_clip(Env& e, const onnx::NodeProto& n) {
  constexpr double kNoBound = 3.4028234663852886e38;  // FLT_MAX: a bound that never binds
  double lo = -kNoBound, hi = kNoBound;
  if (e.f.opset < 11) {
    lo = attr_f(n, "min", lo);
    hi = attr_f(n, "max", hi);
  } else {
    if (attr(n, "min") || attr(n, "max")) refuse(e.f, n, "attributes min and max are inputs from opset 11");
    if (has_input(n, 1)) lo = const_scalar(e, n, 1);
    if (has_input(n, 2)) hi = const_scalar(e, n, 2);
  }
  if (!(lo <= hi)) refuse(e.f, n, "its min " + std::to_string(lo) + " is above its max " + std::to_string(hi));
  const ValueId x = value(e, n, 0);
  if (lo == 0.0 && hi == kNoBound) return bind(e, n, relu(e.b, x));
  if (lo == -kNoBound && hi == kNoBound) return bind(e, n, x);
  bind(e, n, activation(e.b, x, "clip", {{"min", lo}, {"max", hi}}));
}

void op_gelu(Env& e, const onnx::NodeProto& n) {
  const std::string a = attr_s(n, "approximate", "none");
  if (a != "none" && a != "tanh") refuse(e.f, n, "attribute approximate=" + a + " (none or tanh)");
  bind(e, n, gelu(e.b, value(e, n, 0), a == "tanh"));
}

void op_pool(Env& e, const onnx::NodeProto& n, bool max) {
  const ValueId x = value(e, n, 0);
  const Shape xs = shape_of(e, x);
  if (xs.size() != 3 && xs.size() != 4)
    refuse(e.f, n, "memfit takes 1-d and 2-d pooling: input " + shape_str(xs));
  if (!attr(n, "kernel_shape")) refuse(e.f, n, "has no kernel_shape");
  const bool one_d = xs.size() == 3;
  const Spatial sp = spatial(e, n, Shape(xs.begin() + 2, xs.end()), attr_ints(n, "kernel_shape", {}));
  if (sp.dilation != Shape{1, 1})
    refuse(e.f, n, "attribute dilations " + shape_str(attr_ints(n, "dilations", {})) + " is not supported (1 only)");
  if (attr_i(n, "storage_order", 0) != 0) refuse(e.f, n, "attribute storage_order=1 is not supported");
  Attrs a{{"kernel", sp.kernel}, {"stride", sp.stride}, {"pad", sp.pad}};
  if (!max) a.set("count_include_pad", attr_i(n, "count_include_pad", 0));
  if (auto it = e.pending_pads.find(n.input(0)); it != e.pending_pads.end()) {
    // The Pad before it: its zeros are in every window they overlap.
    if (sp.pad != Shape{0, 0}) refuse(e.f, n, "pads both in a Pad before it and in its own pads");
    a.set("pad", one_d ? Shape{0, it->second[0]} : it->second);
    a.set("count_include_pad", int64_t(1));
  }
  // ceil_mode: the output size rounded up. Where that equals the size
  // rounded down (the windows tile the padded input exactly, as in
  // SqueezeNet's pools at its input sizes), both are one pooling; a max
  // pool whose last window is partial is memfit's in ceil mode.
  const ValueId x2 = one_d ? as_2d(e, x) : x;
  if (attr_i(n, "ceil_mode", 0) != 0 && max) {
    a.set("ceil", int64_t(1));
  } else if (attr_i(n, "ceil_mode", 0) != 0) {
    const Shape& s2 = shape_of(e, x2);
    const Shape k = a.ints("kernel"), st = a.ints("stride"), p = a.ints("pad");
    for (size_t d = 0; d < 2; ++d) {
      const int64_t span = s2[2 + d] + 2 * p[d] - k[d];
      if (span >= 0 && span % st[d] != 0)
        refuse(e.f, n, "ceil_mode=1 over " + std::to_string(s2[2 + d]) + " pixels (kernel " + std::to_string(k[d]) +
                       ", stride " + std::to_string(st[d]) + ", pad " + std::to_string(p[d]) + ") gives " +
                       std::to_string(span / st[d] + 2) + " outputs where floor gives " + std::to_string(span / st[d] + 1) +
                       ": memfit's average pooling rounds down only; an input size where they agree imports");
    }
  }
  const ValueId y = e.b.g.add_node(max ? "max_pool2d" : "avg_pool2d", {x2}, std::move(a), layer_of(e, n))[0];
  bind(e, n, one_d ? from_2d(e, y) : y);
}
void op_maxpool(Env& e, const onnx::NodeProto& n) { op_pool(e, n, true); }
void op_avgpool(Env& e, const onnx::NodeProto& n) { op_pool(e, n, false); }

// ReduceMean / ReduceSum over some axes (x.mean([2, 3]) in ShuffleNet, a
// mean of embeddings over the sequence): the kept axes moved first (a
// permute, where the reduced ones are not already last), the tensor seen as
// [1, kept, reduced, 1] and averaged by a global pool, then shaped back
// (with 1s for keepdims); ReduceSum scales the mean back to the sum. Axes
// are an attribute before opset 18 (ReduceSum: 13), an input from then on.
// ReduceMean or ReduceSum (sum) of x over the node's axes.
ValueId reduced(Env& e, const onnx::NodeProto& n, ValueId x, bool sum) {
  const Shape s = shape_of(e, x);
  const bool axes_input = e.f.opset >= (n.op_type() == "ReduceSum" ? 13 : 18);
  if (axes_input && attr(n, "axes")) refuse(e.f, n, "attribute axes is an input from this opset on");
  std::vector<int64_t> axes = axes_input ? (has_input(n, 1) ? const_ints(e, n, 1) : std::vector<int64_t>{})
                                         : attr_ints(n, "axes", {});
  if (axes.empty()) {
    if (attr_i(n, "noop_with_empty_axes", 0) != 0) return x;
    for (size_t k = 0; k < s.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  }
  std::vector<bool> reduced(s.size(), false);
  for (int64_t a : axes) {
    const auto k = static_cast<size_t>(axis_in(e, n, a, s.size()));
    if (reduced[k]) refuse(e.f, n, "axis " + std::to_string(a) + " is listed twice");
    reduced[k] = true;
  }
  std::vector<int64_t> perm;
  Shape kept_dims, out;
  int64_t kept = 1, count = 1;
  const bool keepdims = attr_i(n, "keepdims", 1) != 0;
  for (size_t k = 0; k < s.size(); ++k)
    if (!reduced[k]) perm.push_back(static_cast<int64_t>(k)), kept *= s[k], kept_dims.push_back(s[k]);
  for (size_t k = 0; k < s.size(); ++k) {
    if (reduced[k]) perm.push_back(static_cast<int64_t>(k)), count *= s[k];
    if (keepdims) out.push_back(reduced[k] ? 1 : s[k]);
  }
  if (!keepdims) out = kept_dims;
  bool identity = true;
  for (size_t k = 0; k < perm.size(); ++k) identity = identity && perm[k] == static_cast<int64_t>(k);
  ValueId v = identity ? x : permute(e.b, x, perm);
  v = global_avg_pool(e.b, reshape(e.b, v, {1, kept, count, 1}));
  if (sum) v = e.b.g.add1("scale", {v}, {{"alpha", static_cast<double>(count)}}, layer_of(e, n));
  return reshape(e.b, v, out);
}

void op_reduce(Env& e, const onnx::NodeProto& n) { bind(e, n, reduced(e, n, value(e, n, 0), n.op_type() == "ReduceSum")); }

// ReduceL2: sqrt(sum x^2) over the axes (torch's F.normalize and norm;
// Swin-V2's cosine attention), whose gradient at a zero vector is 0.
void op_reduce_l2(Env& e, const onnx::NodeProto& n) {
  const ValueId x = value(e, n, 0);
  if (n.input_size() > 1 && e.f.opset < 18) refuse(e.f, n, "takes axes as an input before opset 18");
  const std::string layer = layer_of(e, n);
  const ValueId sq = e.b.g.add1("binary", {x, x}, {{"kind", std::string("mul")}}, layer + ".square");
  bind(e, n, activation(e.b, reduced(e, n, sq, true), "sqrt"));
}

// A pointwise function of a constant, folded (f in double, checked by
// `check`, which refuses what it cannot take); of a tensor of the graph,
// the activation `kind`.
template <class F, class Check>
void unary(Env& e, const onnx::NodeProto& n, const char* kind, F f, Check check) {
  if (!foldable(e, n.input(0))) return bind(e, n, activation(e.b, value(e, n, 0), kind));
  const Const& c = constant(e, n, 0);
  Const r;
  r.dims = c.dims;
  r.is_float = true;
  auto out = std::make_shared<std::vector<float>>(static_cast<size_t>(c.size()));
  for (int64_t k = 0; k < c.size(); ++k) {
    const double v = const_at(c, k);
    check(v);
    (*out)[static_cast<size_t>(k)] = static_cast<float>(f(v));
  }
  r.f = std::move(out);
  bind_const(e, n, std::move(r));
}

// Exp (Swin-V2's learned logit scale, exp(clamp(s, max = log 100))).
void op_exp(Env& e, const onnx::NodeProto& n) {
  unary(e, n, "exp", [](double v) { return std::exp(v); }, [](double) {});
}

void op_global_avg_pool(Env& e, const onnx::NodeProto& n) {
  const ValueId x = value(e, n, 0);
  const Shape s = shape_of(e, x);
  if (s.size() != 4) refuse(e.f, n, "memfit takes [N, C, H, W] only, got " + shape_str(s));
  bind(e, n, reshape(e.b, global_avg_pool(e.b, x), {s[0], s[1], 1, 1}));  // ONNX keeps the 1x1 axes
}

// Batch norm, trained with batch statistics and its running statistics
// updated whatever the file's training_mode (ONNX's momentum is the
// running value's weight, PyTorch's the batch's: memfit takes PyTorch's):
// one exported for inference (model.eval(), the dynamo exporter) becomes a
// trained batch norm whose running statistics start from the file's
// (Model::notes says so).
void op_batchnorm(Env& e, const onnx::NodeProto& n) {
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

Shape const_dims(const Const& c) { return c.dims.empty() && c.size() != 1 ? Shape{c.size()} : c.dims; }

// The most elements a folded constant (ConstantOfShape, Expand) may have.
constexpr int64_t kMaxFolded = int64_t(1) << 24;

// The element count of dims, refused past kMaxFolded.
int64_t folded_count(Env& e, const onnx::NodeProto& n, const Shape& dims) {
  int64_t count = 1;
  for (int64_t d : dims) {
    if (d < 1) refuse(e.f, n, "shape " + shape_str(dims) + " has an entry below 1: memfit's tensors are never empty");
    if (__builtin_mul_overflow(count, d, &count) || count > kMaxFolded)
      refuse(e.f, n, "makes a constant of shape " + shape_str(dims) + ": memfit folds constants of up to 2^24 elements");
  }
  return count;
}

// Whether `name` is a constant that arithmetic folds: one a node made
// (Constant, Shape, ConstantOfShape, ...), an integer initializer or a
// single-number one. A float initializer of several numbers is a weight (a
// parameter once a node reads it as a tensor) and never folds.
bool foldable(Env& e, const std::string& name) {
  if (e.consts.count(name)) return true;
  if (!is_const(e, name)) return false;
  const Const& c = e.f.initializers.at(name);
  return !c.is_float || c.size() == 1;
}

// Element k of c as a double.
double const_at(const Const& c, int64_t k) {
  return c.is_float ? static_cast<double>((*c.f)[static_cast<size_t>(k)]) : static_cast<double>(c.i[static_cast<size_t>(k)]);
}

// The numpy broadcast of constant shapes a and b; refuses shapes that do not
// broadcast and results past kMaxFolded elements.

// For each element of `out` (row-major), its index into a constant of
// shape `in` broadcast to out.
std::vector<int64_t> broadcast_index(const Shape& in, const Shape& out) {
  const size_t r = out.size();
  std::vector<int64_t> idx(static_cast<size_t>(numel(out)));
  std::vector<int64_t> at(r, 0);
  for (size_t k = 0; k < idx.size(); ++k) {
    int64_t src = 0;
    for (size_t a = r - in.size(); a < r; ++a) {
      const int64_t d = in[a - (r - in.size())];
      src = src * d + (d == 1 ? 0 : at[a]);
    }
    idx[k] = src;
    for (size_t a = r; a-- > 0;)
      if (++at[a] < out[a]) break;
      else at[a] = 0;
  }
  return idx;
}

// The constant of shape dims whose element k is c's element idx[k].
Const gathered(const Const& c, const Shape& dims, const std::vector<int64_t>& idx) {
  Const r;
  r.dims = dims;
  r.is_float = c.is_float;
  if (c.is_float) {
    auto f = std::make_shared<std::vector<float>>(idx.size());
    for (size_t k = 0; k < idx.size(); ++k) (*f)[k] = (*c.f)[static_cast<size_t>(idx[k])];
    r.f = std::move(f);
  } else {
    r.i.resize(idx.size());
    for (size_t k = 0; k < idx.size(); ++k) r.i[k] = c.i[static_cast<size_t>(idx[k])];
  }
  return r;
}

Shape broadcast_dims(Env& e, const onnx::NodeProto& n, const Shape& a, const Shape& b) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t k = 0; k < r; ++k) {
    const int64_t x = k + a.size() >= r ? a[k + a.size() - r] : 1;
    const int64_t y = k + b.size() >= r ? b[k + b.size() - r] : 1;
    if (x != y && x != 1 && y != 1) refuse(e.f, n, "cannot broadcast " + shape_str(a) + " with " + shape_str(b));
    out[k] = x == 1 ? y : x;
  }
  folded_count(e, n, out);
  return out;
}

// Add, Sub, Mul and Div of import-time constants with numpy broadcasting:
// shape computations in integers (checked for overflow, division
// truncating as ONNX's integer Div), and the float constants a model
// computes from them, such as BERT's attention mask (1 - mask) * min.
bool fold_arith(Env& e, const onnx::NodeProto& n) {
  if (!foldable(e, n.input(0)) || !foldable(e, n.input(1))) return false;
  const Const &a = constant(e, n, 0), &c = constant(e, n, 1);
  const Shape out = broadcast_dims(e, n, const_dims(a), const_dims(c));
  const std::vector<int64_t> ia = broadcast_index(const_dims(a), out), ic = broadcast_index(const_dims(c), out);
  const std::string& op = n.op_type();
  Const r;
  r.dims = a.dims.empty() && c.dims.empty() ? Shape{} : out;
  r.is_float = a.is_float || c.is_float;
  if (op == "Mod" && r.is_float && attr_i(n, "fmod", 0) != 1) refuse(e.f, n, "Mod of floats needs fmod=1 (ONNX's rule)");
  if (r.is_float) {
    auto f = std::make_shared<std::vector<float>>(ia.size());
    for (size_t k = 0; k < ia.size(); ++k) {
      const double x = const_at(a, ia[k]), y = const_at(c, ic[k]);
      (*f)[k] = static_cast<float>(op == "Add"   ? x + y
                                   : op == "Sub" ? x - y
                                   : op == "Mul" ? x * y
                                   : op == "Pow" ? std::pow(x, y)
                                   : op == "Mod" ? std::fmod(x, y)
                                   : op == "Max" ? std::max(x, y)
                                   : op == "Min" ? std::min(x, y)
                                                 : x / y);
    }
    r.f = std::move(f);
    bind_const(e, n, std::move(r));
    return true;
  }
  if (op == "Pow") refuse(e.f, n, "raises integers to a power: memfit folds Pow on floats (a scale such as d ** 0.5)");
  // Mod of integers: fmod=1 keeps the dividend's sign (C's %), fmod=0 the
  // divisor's (Python's %, which torch's remainder writes).
  const bool c_mod = attr_i(n, "fmod", 0) == 1;
  r.i.resize(ia.size());
  for (size_t k = 0; k < ia.size(); ++k) {
    const int64_t x = a.i[static_cast<size_t>(ia[k])], y = c.i[static_cast<size_t>(ic[k])];
    if ((op == "Div" || op == "Mod") && y == 0) refuse(e.f, n, "divides by zero");
    int64_t v = 0;
    bool over = false;
    if (op == "Max" || op == "Min") v = op == "Max" ? std::max(x, y) : std::min(x, y);
    else if (op == "Add") over = __builtin_add_overflow(x, y, &v);
    else if (op == "Sub") over = __builtin_sub_overflow(x, y, &v);
    else if (op == "Mul") over = __builtin_mul_overflow(x, y, &v);
    else if (x == std::numeric_limits<int64_t>::min() && y == -1) v = 0, over = op == "Div";
    else if (op == "Mod") v = x % y, v = !c_mod && v != 0 && ((v < 0) != (y < 0)) ? v + y : v;
    else v = x / y;
    if (over) refuse(e.f, n, "overflows 64-bit integers on its constant inputs");
    r.i[k] = v;
  }
  bind_const(e, n, std::move(r));
  return true;
}

// Add, Sub, Mul or Div of two tensors with numpy broadcasting: memfit's
// binary op (squeeze-and-excitation's x * s, a computed scale or shift).
void op_binary(Env& e, const onnx::NodeProto& n) {
  if (fold_arith(e, n)) return;
  const std::string& op = n.op_type();
  const std::string kind = op == "Add" ? "add" : op == "Sub" ? "sub" : op == "Mul" ? "mul" : "div";
  const ValueId a = value(e, n, 0), c = value(e, n, 1);
  bind(e, n, e.b.g.add1("binary", {a, c}, {{"kind", kind}}, layer_of(e, n)));
}

void op_add(Env& e, const onnx::NodeProto& n) {
  if (fold_arith(e, n)) return;
  const ValueId a = value(e, n, 0), c = value(e, n, 1);
  const Shape as = shape_of(e, a), cs = shape_of(e, c);
  if (as == cs) return bind(e, n, add(e.b, a, c));
  // A bias: the smaller operand broadcast over the larger one's leading axes.
  const bool c_small = numel(cs) <= numel(as);
  const ValueId big = c_small ? a : c, small = c_small ? c : a;
  const Shape t = trailing_of(shape_of(e, big), shape_of(e, small));
  if (t.empty()) return op_binary(e, n);  // any other broadcast
  const ValueId s = t == shape_of(e, small) ? small : reshape(e.b, small, t);
  bind(e, n, add_broadcast(e.b, big, s));
}

// Mul and Div by a scalar constant: memfit's scale; of two tensors, its
// binary op.
void op_scale(Env& e, const onnx::NodeProto& n) {
  if (fold_arith(e, n)) return;
  const bool div = n.op_type() == "Div";
  int k = is_const(e, n.input(1)) ? 1 : !div && is_const(e, n.input(0)) ? 0 : -1;
  if (k >= 0 && constant(e, n, k).size() != 1) k = -1;  // a constant tensor: a broadcast operand
  if (k < 0) return op_binary(e, n);
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
  // allowzero=1 (the dynamo exporter's): a 0 in the shape is an empty axis,
  // which memfit's tensors never have; without one it is the same reshape.
  const bool allowzero = attr_i(n, "allowzero", 0) != 0;
  const bool on_const = foldable(e, n.input(0));  // a shape computation's
  const Shape xs = on_const ? const_dims(constant(e, n, 0)) : shape_of(e, value(e, n, 0));
  Shape to = const_ints(e, n, 1);
  const int64_t exported_batch = e.f.input_dims.empty() ? -1 : e.f.input_dims[0];
  if (!to.empty() && exported_batch > 0 && to[0] == exported_batch && !xs.empty() && xs[0] == e.batch) to[0] = e.batch;
  int64_t known = 1, infer = -1;
  for (size_t k = 0; k < to.size(); ++k) {
    if (to[k] == 0 && allowzero) refuse(e.f, n, "shape " + shape_str(to) + " has an empty axis (allowzero=1): memfit's tensors are never empty");
    if (to[k] == 0) {
      if (k >= xs.size()) refuse(e.f, n, "shape entry 0 at axis " + std::to_string(k) + " past the input's rank");
      to[k] = xs[k];
    }
    if (to[k] == -1) {
      if (infer >= 0) refuse(e.f, n, "shape " + shape_str(to) + " has two -1 entries");
      infer = static_cast<int64_t>(k);
    } else if (to[k] < 1) {
      refuse(e.f, n, "shape entry " + std::to_string(to[k]) + " is not a size");
    } else if (__builtin_mul_overflow(known, to[k], &known)) {
      refuse(e.f, n, "shape " + shape_str(to) + " has more elements than 64-bit integers count");
    }
  }
  if (infer >= 0) to[static_cast<size_t>(infer)] = known > 0 ? numel(xs) / known : 0;
  if (numel(to) != numel(xs)) refuse(e.f, n, "cannot reshape " + shape_str(xs) + " to " + shape_str(to));
  if (on_const) {
    Const c = constant(e, n, 0);
    c.dims = to;
    return bind_const(e, n, std::move(c));
  }
  bind(e, n, reshape(e.b, value(e, n, 0), to));
}

// Transpose: memfit's permute; of a constant (a mask being built), folded.
void op_transpose(Env& e, const onnx::NodeProto& n) {
  const bool on_const = foldable(e, n.input(0));
  const Shape xs = on_const ? const_dims(constant(e, n, 0)) : shape_of(e, value(e, n, 0));
  const size_t r = xs.size();
  Shape reversed;
  for (size_t k = r; k-- > 0;) reversed.push_back(static_cast<int64_t>(k));
  const Shape perm = attr_ints(n, "perm", reversed);
  if (!on_const) return bind(e, n, permute(e.b, value(e, n, 0), perm));
  std::vector<bool> used(r, false);
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(r) || used[static_cast<size_t>(p)]) refuse(e.f, n, "perm " + shape_str(perm) + " is no permutation of " + std::to_string(r) + " axes");
    used[static_cast<size_t>(p)] = true;
  }
  if (perm.size() != r) refuse(e.f, n, "perm " + shape_str(perm) + " is no permutation of " + std::to_string(r) + " axes");
  Shape out(r), stride(r, 1);
  for (size_t a = r; a-- > 1;) stride[a - 1] = stride[a] * xs[a];
  for (size_t a = 0; a < r; ++a) out[a] = xs[static_cast<size_t>(perm[a])];
  std::vector<int64_t> src(static_cast<size_t>(numel(out))), at(r, 0);
  for (size_t k = 0; k < src.size(); ++k) {
    int64_t off = 0;
    for (size_t a = 0; a < r; ++a) off += at[a] * stride[static_cast<size_t>(perm[a])];
    src[k] = off;
    for (size_t a = r; a-- > 0;)
      if (++at[a] < out[a]) break;
      else at[a] = 0;
  }
  bind_const(e, n, gathered(constant(e, n, 0), out, src));
}

void op_concat(Env& e, const onnx::NodeProto& n) {
  bool all_const = true;
  for (int k = 0; k < n.input_size(); ++k) all_const = all_const && is_const(e, n.input(k));
  bool lists = true;  // every input a number or a list: a shape being assembled
  for (int k = 0; k < n.input_size() && all_const; ++k) lists = lists && const_dims(constant(e, n, k)).size() <= 1;
  if (all_const && lists) {
    Const r;
    for (int k = 0; k < n.input_size(); ++k)
      for (int64_t v : const_ints(e, n, k)) r.i.push_back(v);
    r.dims = {static_cast<int64_t>(r.i.size())};
    return bind_const(e, n, std::move(r));
  }
  if (all_const) {  // constants of higher rank (an index buffer given its last axis)
    const Const& first = constant(e, n, 0);
    Shape out = const_dims(first);
    const auto axis = static_cast<size_t>(axis_in(e, n, attr_i(n, "axis", 0), out.size()));
    for (int k = 1; k < n.input_size(); ++k) {
      const Const& c = constant(e, n, k);
      const Shape d = const_dims(c);
      bool fits = d.size() == out.size() && c.is_float == first.is_float;
      for (size_t a = 0; fits && a < d.size(); ++a) fits = a == axis || d[a] == out[a];
      if (!fits) refuse(e.f, n, "concatenates constants of shapes or types that differ off its axis");
      out[axis] += d[axis];
    }
    folded_count(e, n, out);
    int64_t outer = 1, inner = 1;
    for (size_t a = 0; a < axis; ++a) outer *= out[a];
    for (size_t a = axis + 1; a < out.size(); ++a) inner *= out[a];
    Const r;
    r.dims = out;
    r.is_float = first.is_float;
    std::vector<float> f;
    for (int64_t o = 0; o < outer; ++o)
      for (int k = 0; k < n.input_size(); ++k) {
        const Const& c = constant(e, n, k);
        const int64_t block = const_dims(c)[axis] * inner;
        for (int64_t t = 0; t < block; ++t) {
          if (r.is_float) f.push_back((*c.f)[static_cast<size_t>(o * block + t)]);
          else r.i.push_back(c.i[static_cast<size_t>(o * block + t)]);
        }
      }
    if (r.is_float) r.f = std::make_shared<std::vector<float>>(std::move(f));
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

// SplitToSequence(x, split): x cut along the axis into a sequence of
// pieces (torch.chunk and torch.split as the dynamo exporter writes them):
// split a number is each piece's size (the last one smaller if the axis
// does not divide), a list the sizes, none pieces of 1 (without the axis
// when keepdims=0). The pieces are slices of the graph; SequenceAt picks one.
void op_split_to_sequence(Env& e, const onnx::NodeProto& n) {
  if (is_const(e, n.input(0))) refuse(e.f, n, "splits a constant: memfit splits tensors of the graph");
  const ValueId x = value(e, n, 0);
  const Shape xs = shape_of(e, x);
  const int64_t axis = axis_in(e, n, attr_i(n, "axis", 0), xs.size());
  const int64_t len = xs[static_cast<size_t>(axis)];
  Shape sizes;
  bool squeeze = false;
  if (!has_input(n, 1)) {
    sizes.assign(static_cast<size_t>(len), 1);
    squeeze = attr_i(n, "keepdims", 1) == 0;
  } else if (const Const& c = constant(e, n, 1); !c.is_float && c.dims.empty() && c.size() == 1) {
    const int64_t each = c.i[0];
    if (each < 1) refuse(e.f, n, "split " + std::to_string(each) + " is not a size");
    for (int64_t at = 0; at < len; at += each) sizes.push_back(std::min(each, len - at));
  } else {
    sizes = const_ints(e, n, 1);
  }
  if (sizes.size() > 4096) refuse(e.f, n, "makes " + std::to_string(sizes.size()) + " pieces: memfit takes up to 4096");
  std::vector<ValueId> pieces;
  int64_t start = 0;
  for (int64_t size : sizes) {
    if (size < 1 || size > len - start) refuse(e.f, n, "split sizes " + shape_str(sizes) + " do not add up to the axis's " + std::to_string(len));
    ValueId p = slice(e.b, x, axis, start, size);
    if (squeeze) {
      Shape ps = xs;
      ps.erase(ps.begin() + axis);
      p = reshape(e.b, p, ps);
    }
    pieces.push_back(p);
    start += size;
  }
  if (start != len) refuse(e.f, n, "split sizes " + shape_str(sizes) + " do not add up to the axis's " + std::to_string(len));
  e.sequences[n.output(0)] = std::move(pieces);
}

// SequenceAt(sequence, position): a SplitToSequence's piece.
void op_sequence_at(Env& e, const onnx::NodeProto& n) {
  const auto seq = e.sequences.find(n.input(0));
  if (seq == e.sequences.end()) refuse(e.f, n, "reads '" + n.input(0) + "', which is no SplitToSequence's output");
  const double at = const_scalar(e, n, 1);
  const auto count = static_cast<double>(seq->second.size());
  if (!(at >= -count && at < count) || at != std::floor(at))
    refuse(e.f, n, "position " + std::to_string(at) + " is outside a sequence of " + std::to_string(seq->second.size()));
  bind(e, n, seq->second[static_cast<size_t>(at < 0 ? at + count : at)]);
}

// A constant's dims ([size] for a bare list of numbers).
// The box [from, from + len) of a constant, row-major.
Const slice_const(const Const& c, const std::vector<int64_t>& from, const std::vector<int64_t>& len) {
  const Shape dims = const_dims(c);
  Const r;
  r.is_float = c.is_float;
  r.dims = Shape(len.begin(), len.end());
  std::vector<float> f;
  const int64_t total = numel(r.dims);
  std::vector<int64_t> at(dims.size(), 0);
  for (int64_t k = 0; k < total; ++k) {
    int64_t src = 0;
    for (size_t a = 0; a < dims.size(); ++a) src = src * dims[a] + from[a] + at[a];
    if (c.is_float) f.push_back((*c.f)[static_cast<size_t>(src)]);
    else r.i.push_back(c.i[static_cast<size_t>(src)]);
    for (size_t a = dims.size(); a-- > 0;)
      if (++at[a] < len[a]) break;
      else at[a] = 0;
  }
  if (c.is_float) r.f = std::make_shared<std::vector<float>>(std::move(f));
  return r;
}

// Slice with constant starts, ends, axes and steps 1; clamped as ONNX does.
// Slice of a constant with steps, negative ones too (torch.flip of an
// index grid): ONNX's rule, per axis the entries from start towards end by
// step, start clamped to [0, D - 1] and end to [-1, D] for a negative step.
Const const_slice_steps(Env& e, const onnx::NodeProto& n, const Shape& xs, const Shape& starts, const Shape& ends,
                        const Shape& axes, const Shape& steps) {
  std::vector<std::vector<int64_t>> pick(xs.size());
  for (size_t a = 0; a < xs.size(); ++a)
    for (int64_t i = 0; i < xs[a]; ++i) pick[a].push_back(i);
  for (size_t k = 0; k < axes.size(); ++k) {
    const auto a = static_cast<size_t>(axis_in(e, n, axes[k], xs.size()));
    const int64_t D = xs[a], st = steps.empty() ? 1 : steps[k];
    int64_t b = starts[k] < 0 ? starts[k] + D : starts[k], end = ends[k] < 0 ? ends[k] + D : ends[k];
    pick[a].clear();
    if (st > 0) {
      b = std::clamp(b, int64_t(0), D), end = std::clamp(end, int64_t(0), D);
      for (int64_t i = b; i < end; i += st) pick[a].push_back(i);
    } else {
      b = std::clamp(b, int64_t(0), D - 1), end = std::clamp(end, int64_t(-1), D - 1);
      for (int64_t i = b; i > end; i += st) pick[a].push_back(i);
    }
    if (pick[a].empty()) refuse(e.f, n, "the slice of axis " + std::to_string(a) + " is empty");
  }
  Shape out;
  for (const auto& p : pick) out.push_back(static_cast<int64_t>(p.size()));
  folded_count(e, n, out);
  std::vector<int64_t> src(static_cast<size_t>(numel(out))), at(xs.size(), 0);
  for (size_t k = 0; k < src.size(); ++k) {
    int64_t off = 0;
    for (size_t a = 0; a < xs.size(); ++a) off = off * xs[a] + pick[a][static_cast<size_t>(at[a])];
    src[k] = off;
    for (size_t a = xs.size(); a-- > 0;)
      if (++at[a] < out[a]) break;
      else at[a] = 0;
  }
  return gathered(constant(e, n, 0), out, src);
}

void op_slice(Env& e, const onnx::NodeProto& n) {
  const bool on_const = is_const(e, n.input(0));
  const Shape xs = on_const ? const_dims(constant(e, n, 0)) : shape_of(e, value(e, n, 0));
  const Shape starts = has_input(n, 1) ? const_ints(e, n, 1) : attr_ints(n, "starts", {});
  const Shape ends = has_input(n, 2) ? const_ints(e, n, 2) : attr_ints(n, "ends", {});
  Shape axes = has_input(n, 3) ? const_ints(e, n, 3) : attr_ints(n, "axes", {});
  const Shape steps = has_input(n, 4) ? const_ints(e, n, 4) : Shape{};
  if (axes.empty())
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  if (starts.size() != ends.size() || axes.size() != starts.size()) refuse(e.f, n, "starts, ends and axes differ in length");
  if (!steps.empty() && steps.size() != axes.size()) refuse(e.f, n, "steps and axes differ in length");
  // A positive step s (Swin's patch merging, x[:, 0::2, 1::2, :]) on a
  // tensor of the graph whose axis s divides: the axis read as [D / s, s],
  // the slice taking one entry of the second. Other steps are refused.
  std::vector<int64_t> from(xs.size(), 0), len(xs.begin(), xs.end()), step(xs.size(), 1);
  for (size_t k = 0; k < axes.size(); ++k) {
    const auto a = static_cast<size_t>(axis_in(e, n, axes[k], xs.size()));
    step[a] = steps.empty() ? 1 : steps[k];
    if (step[a] == 0) refuse(e.f, n, "has step 0");
    if (on_const && step[a] != 1) continue;  // by const_slice_steps below
    if (step[a] != 1 && (step[a] < 1 || xs[a] % step[a] != 0))
      refuse(e.f, n, "step " + std::to_string(step[a]) + " is not supported (1, or a positive step that divides the axis of a "
                     "tensor of the graph)");
    auto clampi = [&](int64_t v) { return std::clamp(v < 0 ? v + xs[a] : v, int64_t(0), xs[a]); };
    from[a] = clampi(starts[k]);
    len[a] = std::max<int64_t>(0, (clampi(ends[k]) - from[a] + step[a] - 1) / step[a]);
    // An empty piece of a shape is an empty list (torch's unflatten writes
    // shape[:d] + sizes + shape[d + 1:], whose last part is empty at the
    // last axis); memfit's tensors are never empty.
    const bool shape_list = on_const && xs.size() == 1 && !constant(e, n, 0).is_float;
    if (len[a] == 0 && !shape_list) refuse(e.f, n, "the slice of axis " + std::to_string(a) + " is empty");
  }
  if (on_const && std::any_of(step.begin(), step.end(), [](int64_t v) { return v != 1; }))
    return bind_const(e, n, const_slice_steps(e, n, xs, starts, ends, axes, steps));
  if (on_const) return bind_const(e, n, slice_const(constant(e, n, 0), from, len));
  ValueId y = value(e, n, 0);
  for (size_t a = 0; a < xs.size(); ++a) {
    if (step[a] == 1) {
      if (from[a] != 0 || len[a] != xs[a]) y = slice(e.b, y, static_cast<int64_t>(a), from[a], len[a]);
      continue;
    }
    Shape split = shape_of(e, y), out = split;  // axis a as [D / s, s]
    split[a] = xs[a] / step[a];
    split.insert(split.begin() + static_cast<int64_t>(a) + 1, step[a]);
    out[a] = len[a];
    y = reshape(e.b, y, split);
    y = slice(e.b, y, static_cast<int64_t>(a) + 1, from[a] % step[a], 1);
    if (from[a] / step[a] != 0 || len[a] != split[a]) y = slice(e.b, y, static_cast<int64_t>(a), from[a] / step[a], len[a]);
    y = reshape(e.b, y, out);
  }
  bind(e, n, y);
}

// ConstantOfShape(shape): a constant of that shape, every element `value`
// (a one-number tensor; float 0 without it), as torch writes a recurrent
// layer's zero initial state. Its shape is known at import (memfit's shapes
// are static), so it is folded.
void op_constant_of_shape(Env& e, const onnx::NodeProto& n) {
  const Shape dims = const_ints(e, n, 0);
  const int64_t count = folded_count(e, n, dims);
  Const fill;
  if (const auto* a = attr(n, "value")) {
    fill = read_tensor(e.f, a->t(), "node '" + n.name() + "''s value");
    if (fill.size() != 1) refuse(e.f, n, "its value must hold one number, got " + std::to_string(fill.size()));
  } else {
    fill.is_float = true;
    fill.f = std::make_shared<std::vector<float>>(1, 0.0f);
  }
  Const c;
  c.dims = dims;
  c.is_float = fill.is_float;
  if (c.is_float) c.f = std::make_shared<std::vector<float>>(static_cast<size_t>(count), (*fill.f)[0]);
  else c.i.assign(static_cast<size_t>(count), fill.i[0]);
  bind_const(e, n, std::move(c));
}

// Expand(x, shape): x broadcast to shape (numpy's rule, either side's 1s
// stretched). A constant is folded. A tensor of the graph passes where the
// result has its shape; memfit broadcasts inside the op that reads a tensor
// (add_broadcast, binary), so an Expand that grows one is refused.
// Expand: of constants, folded; of a weight or a tensor of the graph, a
// copy over its leading axes (expand_leading: ViT's class token
// [1, 1, D] -> [N, 1, D]), its 1s before the kept axes dropped. Repeating
// any other axis is refused: memfit broadcasts inside the op that reads it.
// Whether every node reading Expand n's output is an elementwise Add, Sub,
// Mul or Div whose other operand, a tensor of the graph already made, has
// the expanded shape: that op broadcasts x itself, so the copy is not made
// (F.normalize's x / norm.expand_as(x)).
bool expand_read_by_broadcast(Env& e, const onnx::NodeProto& n, const Shape& out) {
  bool read = false;
  for (const auto& r : e.f.graph.node()) {
    for (int k = 0; k < r.input_size(); ++k) {
      if (r.input(k) != n.output(0)) continue;
      const std::string& op = r.op_type();
      if ((op != "Add" && op != "Sub" && op != "Mul" && op != "Div") || r.input_size() != 2) return false;
      const auto other = e.values.find(r.input(1 - k));
      if (other == e.values.end() || shape_of(e, other->second) != out) return false;
      read = true;
    }
  }
  return read;
}

void op_expand(Env& e, const onnx::NodeProto& n) {
  const bool on_const = foldable(e, n.input(0));
  const Shape xs = on_const ? const_dims(constant(e, n, 0)) : shape_of(e, value(e, n, 0));
  const Shape out = broadcast_dims(e, n, xs, const_ints(e, n, 1));
  if (!on_const) {
    const ValueId x = value(e, n, 0);
    if (out == xs) return bind(e, n, x);
    if (expand_read_by_broadcast(e, n, out)) return bind(e, n, x);
    // The leading axes that grow must be 1s in x; from the first that
    // does not grow on, x's axes are the output's.
    const size_t lead = out.size() - xs.size();
    size_t keep = 0;
    while (keep < xs.size() && xs[keep] == 1 && out[lead + keep] != 1) ++keep;
    const Shape tail(xs.begin() + static_cast<int64_t>(keep), xs.end());
    if (!std::equal(tail.begin(), tail.end(), out.end() - static_cast<int64_t>(tail.size())) || tail.empty())
      refuse(e.f, n, "expands a tensor of the graph from " + shape_str(xs) + " to " + shape_str(out) +
                     ": memfit repeats a tensor over its leading axes only, and broadcasts inside the op that reads it "
                     "(Add, Mul, ...)");
    return bind(e, n, expand_leading(e.b, tail == xs ? x : reshape(e.b, x, tail), out));
  }
  bind_const(e, n, gathered(constant(e, n, 0), out, broadcast_index(xs, out)));
}

void op_softmax(Env& e, const onnx::NodeProto& n) {
  const ValueId x = value(e, n, 0);
  const size_t r = shape_of(e, x).size();
  // Before opset 13 the axis flattened the trailing axes; both agree on the last one.
  if (axis_in(e, n, attr_i(n, "axis", e.f.opset >= 13 ? -1 : 1), r) != static_cast<int64_t>(r) - 1)
    refuse(e.f, n, "softmax over axis " + std::to_string(attr_i(n, "axis", -1)) + ": memfit takes the last axis only");
  bind(e, n, softmax(e.b, x));
}

// LogSoftmax as the model's last node, over the classes (the last axis): a
// model trained with NLLLoss on its log-probabilities, as courses write
// them. memfit's loss is softmax cross-entropy on the output, and
// softmax_xent(log_softmax(x)) = -log_softmax(x)[label] = NLLLoss of the
// model's own log-probabilities, which equals softmax_xent(x): the node is
// the loss's own first half, so it is taken into the loss (no second
// softmax, the same gradient) and the logits it reads are the output.
// Anywhere else it is refused.
void op_log_softmax(Env& e, const onnx::NodeProto& n) {
  const ValueId x = value(e, n, 0);
  const size_t r = shape_of(e, x).size();
  if (axis_in(e, n, attr_i(n, "axis", e.f.opset >= 13 ? -1 : 1), r) != static_cast<int64_t>(r) - 1)
    refuse(e.f, n, "log-softmax over axis " + std::to_string(attr_i(n, "axis", -1)) + ": memfit takes the last axis only");
  if (n.output(0) != e.f.output)
    refuse(e.f, n, "memfit takes LogSoftmax as the model's last node only (the log-probabilities its loss reads)");
  bind(e, n, x);
}

void op_dropout(Env& e, const onnx::NodeProto& n) {
  const double p = has_input(n, 1) ? const_scalar(e, n, 1) : attr_f(n, "ratio", 0.5);
  const bool train = has_input(n, 2) ? const_scalar(e, n, 2) != 0 : false;
  if (!(p >= 0 && p < 1)) refuse(e.f, n, "ratio " + std::to_string(p) + " is outside [0, 1)");
  const ValueId x = value(e, n, 0);
  bind(e, n, train ? dropout(e.b, x, p, layer_of(e, n)) : x);
}

// Gather of one entry along an axis of a tensor of the graph by a constant
// index (h_n[-1] of a recurrent layer, [1, N, H] -> [N, H]): a slice, the
// axis dropped for a scalar index. A 2-d table's row along axis 0 is
// op_gather's. Returns false where this is not that gather.
bool gather_one(Env& e, const onnx::NodeProto& n) {
  if (is_const(e, n.input(0)) || !is_const(e, n.input(1))) return false;
  const Const& c = constant(e, n, 1);
  if (c.is_float || c.size() != 1 || c.dims.size() > 1) return false;
  const ValueId x = value(e, n, 0);
  const Shape xs = shape_of(e, x);
  const auto axis = static_cast<size_t>(axis_in(e, n, attr_i(n, "axis", 0), xs.size()));
  if (xs.size() == 2 && axis == 0) return false;
  const int64_t d = xs[axis];
  int64_t i = c.i[0];
  if (i < -d || i >= d) refuse(e.f, n, "index " + std::to_string(i) + " is out of range for axis " + std::to_string(axis) + " of " + shape_str(xs));
  if (i < 0) i += d;
  const ValueId y = d == 1 ? x : slice(e.b, x, static_cast<int64_t>(axis), i, 1);
  Shape out = xs;
  if (c.dims.empty()) out.erase(out.begin() + static_cast<int64_t>(axis));
  else out[axis] = 1;
  bind(e, n, out == shape_of(e, y) ? y : reshape(e.b, y, out));
  return true;
}

// Gather from a float table by token ids: an embedding (the table a
// parameter). On constants: a shape's entries.
// Rows of a tensor of the graph at constant positions (negative ones from
// the end), shaped [index dims..., row dims...]: gather_rows (Swin's
// relative position bias, its table read by the module's index buffer).
ValueId rows_at(Env& e, const onnx::NodeProto& n, ValueId table, std::vector<int64_t> idx, const Shape& index_dims) {
  const Shape ts = shape_of(e, table);
  if (ts.empty() || idx.empty()) refuse(e.f, n, "gathers no rows, or from a scalar");
  if (idx.size() > (size_t(1) << 24)) refuse(e.f, n, "gathers " + std::to_string(idx.size()) + " rows: memfit takes up to 2^24");
  for (int64_t& i : idx) {
    if (i < -ts[0] || i >= ts[0]) refuse(e.f, n, "gathers row " + std::to_string(i) + " outside the table " + shape_str(ts));
    if (i < 0) i += ts[0];
  }
  const ValueId y = gather_rows(e.b, table, std::move(idx));
  Shape out = index_dims;
  out.insert(out.end(), ts.begin() + 1, ts.end());
  return out == shape_of(e, y) ? y : reshape(e.b, y, out);
}

// GatherND(data, indices) with batch_dims 0 and one index per row
// (indices [..., 1]) of a tensor of the graph at constant indices: its
// rows (the dynamo exporter's form of table[index_buffer]); of constants
// it folds.
void op_gather_nd(Env& e, const onnx::NodeProto& n) {
  if (attr_i(n, "batch_dims", 0) != 0) refuse(e.f, n, "batch_dims " + std::to_string(attr_i(n, "batch_dims", 0)) + " is not supported (0 only)");
  if (!is_const(e, n.input(1))) refuse(e.f, n, "gathers by indices the graph computes: memfit gathers at constant indices only");
  const Const& ix = constant(e, n, 1);
  if (ix.is_float) refuse(e.f, n, "has float indices");
  Shape is = const_dims(ix);
  if (is.empty() || is.back() != 1)
    refuse(e.f, n, "indices " + shape_str(is) + " name more than one axis per entry: memfit gathers rows (indices [..., 1])");
  is.pop_back();
  if (foldable(e, n.input(0))) {
    const Const& d = constant(e, n, 0);
    const Shape ds = const_dims(d);
    if (ds.empty()) refuse(e.f, n, "gathers from a scalar");
    const int64_t row = numel(ds) / ds[0];
    Shape out = is;
    out.insert(out.end(), ds.begin() + 1, ds.end());
    folded_count(e, n, out);
    std::vector<int64_t> src;
    for (int64_t i : ix.i) {
      if (i < -ds[0] || i >= ds[0]) refuse(e.f, n, "gathers row " + std::to_string(i) + " outside " + shape_str(ds));
      for (int64_t t = 0; t < row; ++t) src.push_back((i < 0 ? i + ds[0] : i) * row + t);
    }
    return bind_const(e, n, gathered(d, out, src));
  }
  bind(e, n, rows_at(e, n, value(e, n, 0), ix.i, is));
}

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
  if (gather_one(e, n)) return;
  if (attr_i(n, "axis", 0) != 0) refuse(e.f, n, "gathers along axis " + std::to_string(attr_i(n, "axis", 0)) + ": memfit gathers table rows only (an embedding)");
  const ValueId table = value(e, n, 0);
  if (is_const(e, n.input(1))) {
    // Rows by constant indices: a position table read at arange(T) is its
    // first T rows (a slice, whose gradient reaches those rows).
    const Const& c = constant(e, n, 1);
    const std::vector<int64_t> idx = const_ints(e, n, 1);
    const Shape ts = shape_of(e, table);
    if (idx.size() > 1 && std::all_of(idx.begin(), idx.end(), [&](int64_t i) { return i == idx[0]; })) {
      // One row for every position (BERT's token types, all 0 when the
      // module is called without them): that row, [1, ..., 1, dim], which
      // the op reading it broadcasts; its gradient reaches that row alone.
      if (ts.size() != 2 || idx[0] < 0 || idx[0] >= ts[0]) refuse(e.f, n, "gathers rows outside the table " + shape_str(ts));
      Shape out(const_dims(c).size(), 1);
      out.push_back(ts[1]);
      return bind(e, n, reshape(e.b, ts[0] == 1 ? table : slice(e.b, table, 0, idx[0], 1), out));
    }
    bool run = !idx.empty();
    for (size_t k = 0; k < idx.size(); ++k) run = run && idx[k] == idx[0] + static_cast<int64_t>(k);
    if (!run) return bind(e, n, rows_at(e, n, table, idx, const_dims(c)));
    // Of a tensor of any rank: its consecutive entries along axis 0 (the
    // dynamo exporter's as_strided of a contiguous view: a flattened tensor
    // read at n * C + c, a reshape).
    if (idx.empty() || idx[0] < 0 || ts.empty() || idx.back() >= ts[0])
      refuse(e.f, n, "gathers rows outside the table " + shape_str(ts));
    ValueId rows = static_cast<int64_t>(idx.size()) == ts[0] ? table : slice(e.b, table, 0, idx[0], static_cast<int64_t>(idx.size()));
    Shape out = const_dims(c);
    out.insert(out.end(), ts.begin() + 1, ts.end());
    return bind(e, n, out == shape_of(e, rows) ? rows : reshape(e.b, rows, out));
  }
  const ValueId ids = value(e, n, 1);
  if (e.b.g.value(ids).dtype != DType::i32 || shape_of(e, table).size() != 2)
    refuse(e.f, n, "memfit gathers rows of a [vocab, dim] table by token ids only (an embedding)");
  bind(e, n, e.b.g.add1("embedding", {ids, table}, {{"dtype", int64_t(DType::f32)}}, layer_of(e, n)));
}

// GatherElements(data, indices, axis) of constants: out[.., i, ..] =
// data[.., indices[.., i, ..], ..] along the axis, out shaped as the
// indices (torch.gather; Hugging Face's BERT gathers its all-zero token
// types by its position ids). Of a tensor of the graph it is refused.
void op_gather_elements(Env& e, const onnx::NodeProto& n) {
  if (!foldable(e, n.input(0)) || !is_const(e, n.input(1)))
    refuse(e.f, n, "gathers from a tensor of the graph: memfit imports GatherElements on constants only (ids or masks "
                   "computed from a module's buffers)");
  const Const &d = constant(e, n, 0), &ix = constant(e, n, 1);
  if (ix.is_float) refuse(e.f, n, "has float indices");
  const Shape ds = const_dims(d), is = const_dims(ix);
  if (ds.size() != is.size() || ds.empty())
    refuse(e.f, n, "indices " + shape_str(is) + " and data " + shape_str(ds) + " differ in rank");
  const auto axis = static_cast<size_t>(axis_in(e, n, attr_i(n, "axis", 0), ds.size()));
  for (size_t a = 0; a < ds.size(); ++a)
    if (a != axis && is[a] > ds[a]) refuse(e.f, n, "indices " + shape_str(is) + " exceed data " + shape_str(ds) + " on axis " + std::to_string(a));
  folded_count(e, n, is);
  std::vector<int64_t> src(static_cast<size_t>(numel(is)));
  std::vector<int64_t> at(is.size(), 0);
  for (size_t k = 0; k < src.size(); ++k) {
    int64_t j = ix.i[k];
    if (j < -ds[axis] || j >= ds[axis]) refuse(e.f, n, "index " + std::to_string(j) + " is out of range for axis " + std::to_string(axis) + " of " + shape_str(ds));
    if (j < 0) j += ds[axis];
    int64_t off = 0;
    for (size_t a = 0; a < ds.size(); ++a) off = off * ds[a] + (a == axis ? j : at[a]);
    src[k] = off;
    for (size_t a = is.size(); a-- > 0;)
      if (++at[a] < is[a]) break;
      else at[a] = 0;
  }
  bind_const(e, n, gathered(d, is, src));
}

// Identity: of a constant, the constant; of a weight (a float initializer
// of several numbers: the dynamo exporter writes a parameter's clone() so,
// Swin-V2's qkv bias) or a tensor of the graph, the same value.
void op_identity(Env& e, const onnx::NodeProto& n) {
  if (foldable(e, n.input(0))) return bind_const(e, n, constant(e, n, 0));
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

// Whether every node reading `name` is an AveragePool (and one does).
bool read_by_average_pools(Env& e, const std::string& name) {
  bool any = false;
  for (const auto& m : e.f.graph.node())
    for (const auto& in : m.input())
      if (in == name) {
        if (m.op_type() != "AveragePool") return false;
        any = true;
      }
  return any && name != e.f.output;
}

// x with zeros before and after each axis (pads: ONNX's, all the befores
// then all the afters): a concat with constant buffers of zeros, whose
// gradient to x is its slice (Swin's windows padded to a multiple of
// their size).
ValueId zero_padded(Env& e, const onnx::NodeProto& n, ValueId x, const Shape& pads) {
  const size_t r = pads.size() / 2;
  for (size_t a = 0; a < r; ++a) {
    std::vector<ValueId> parts;
    for (int side = 0; side < 2; ++side) {
      const int64_t p = pads[a + static_cast<size_t>(side) * r];
      if (p == 0) continue;
      Shape zs = shape_of(e, x);
      zs[a] = p;
      if (numel(zs) > (int64_t(1) << 28)) refuse(e.f, n, "pads " + shape_str(zs) + " of zeros: memfit takes up to 2^28");
      const ValueId z = e.b.g.buffer("constant:" + n.output(0) + ":" + std::to_string(a) + (side ? ":after" : ":before"), zs);
      e.b.g.value(z).init = InitSpec{InitSpec::Zeros, 0, nullptr};
      e.b.g.value(z).constant = true;
      parts.push_back(z);
      if (side == 0) parts.push_back(x);
    }
    if (parts.empty()) continue;
    if (pads[a] == 0) parts.insert(parts.begin(), x);
    x = concat(e.b, parts, static_cast<int64_t>(a));
  }
  return x;
}

// Pad: of zero width (torch puts one before every average pool), nothing;
// with zeros on both sides of an image's spatial axes alike and read by
// average pools only, their padding (nn.AvgPool2d(padding=p) as torch
// exports it, counting the padding); any other padding with zeros, a
// concat with zeros. Other pads (negative, or not with zeros) are refused.
void op_pad(Env& e, const onnx::NodeProto& n) {
  const Shape pads = has_input(n, 1) ? const_ints(e, n, 1) : attr_ints(n, "pads", {});
  const ValueId x = value(e, n, 0);
  if (std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; })) return bind(e, n, x);
  const Shape xs = shape_of(e, x);
  const size_t r = xs.size();
  auto give = [&](const std::string& why) {
    refuse(e.f, n, "pads " + shape_str(pads) + ": " + why + "; memfit pads with zeros, or inside Conv and pooling");
  };
  if (pads.size() != 2 * r) give("not two per axis of the input's " + std::to_string(r));
  if (attr_s(n, "mode", "constant") != "constant") give("mode " + attr_s(n, "mode", ""));
  if (has_input(n, 2) && const_scalar(e, n, 2) != 0.0) give("a constant other than 0");
  if (has_input(n, 3)) give("axes given");
  if (std::any_of(pads.begin(), pads.end(), [](int64_t p) { return p < 0; })) give("a negative pad crops");
  // An average pool's own padding: an image's spatial axes, both sides alike.
  bool pool_pad = r == 3 || r == 4;
  Shape spatial;
  for (size_t i = 0; i < r && pool_pad; ++i) {
    pool_pad = i < 2 ? pads[i] == 0 && pads[i + r] == 0 : pads[i] == pads[i + r];
    if (i >= 2) spatial.push_back(pads[i]);
  }
  if (!pool_pad || !read_by_average_pools(e, n.output(0))) return bind(e, n, zero_padded(e, n, x, pads));
  e.pending_pads[n.output(0)] = spatial;
  bind(e, n, x);
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
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) refuse(e.f, n, "lists an axis twice");
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
// A constant as floats or as integers (Cast, CastLike); a float that is no
// 64-bit integer (NaN, infinite, beyond its range) is refused.
Const cast_const(Env& e, const onnx::NodeProto& n, Const c, bool to_float) {
  if (to_float && !c.is_float) {
    c.f = std::make_shared<std::vector<float>>(c.i.begin(), c.i.end());
    c.is_float = true;
    c.i.clear();
  } else if (!to_float && c.is_float) {
    c.i.clear();
    for (float v : *c.f) {
      if (!(std::abs(v) < 9.2e18f)) refuse(e.f, n, "casts " + std::to_string(v) + " to an integer");
      c.i.push_back(static_cast<int64_t>(v));
    }
    c.is_float = false;
    c.f.reset();
  }
  return c;
}

void op_cast(Env& e, const onnx::NodeProto& n) {
  // To float32, a float tensor of the graph stays as it is (memfit's types
  // follow --precision); a model's .float() or .to(dtype) of its own floats.
  if (!is_const(e, n.input(0)) && attr_i(n, "to", 0) == onnx::TensorProto::FLOAT &&
      e.b.g.value(value(e, n, 0)).dtype != DType::i32)
    return bind(e, n, value(e, n, 0));
  if (!is_const(e, n.input(0)))
    refuse(e.f, n, "casts a tensor of the graph: memfit's types follow its precision policy (--precision), not the file");
  const int64_t to = attr_i(n, "to", 0);
  bind_const(e, n, cast_const(e, n, constant(e, n, 0), to == onnx::TensorProto::FLOAT || to == onnx::TensorProto::DOUBLE));
}

// CastLike(x, like): Cast to the type of `like`. A constant cast like a
// float tensor of the graph (the dynamo exporter's zero bias, its scalar
// factors) becomes a float constant; like an integer tensor, an integer
// one. A float tensor of the graph cast like a float stays as it is.
void op_cast_like(Env& e, const onnx::NodeProto& n) {
  // The type of `like`: a constant's, a graph value's, or float for a
  // value a pattern took (stochastic depth's uniform noise, which the
  // dynamo exporter casts its survival probability like).
  bool to_float = true;
  if (is_const(e, n.input(1))) to_float = constant(e, n, 1).is_float;
  else if (e.values.count(n.input(1))) to_float = e.b.g.value(value(e, n, 1)).dtype != DType::i32;
  if (!is_const(e, n.input(0))) {
    if (to_float && e.b.g.value(value(e, n, 0)).dtype != DType::i32) return bind(e, n, value(e, n, 0));
    refuse(e.f, n, "casts a tensor of the graph: memfit's types follow its precision policy (--precision), not the file");
  }
  bind_const(e, n, cast_const(e, n, constant(e, n, 0), to_float));
}

// Range(start, limit, delta) of constants (torch.arange): a constant.
void op_range(Env& e, const onnx::NodeProto& n) {
  const double start = const_scalar(e, n, 0), limit = const_scalar(e, n, 1), delta = const_scalar(e, n, 2);
  if (delta == 0) refuse(e.f, n, "has delta 0");
  const double steps = std::max(0.0, std::ceil((limit - start) / delta));
  if (!(steps <= double(int64_t(1) << 24))) refuse(e.f, n, "makes " + std::to_string(steps) + " numbers");
  const auto count = static_cast<int64_t>(steps);
  Const c;
  c.is_float = constant(e, n, 0).is_float;
  if (c.is_float) c.f = std::make_shared<std::vector<float>>();
  for (int64_t k = 0; k < count; ++k) {
    const double v = start + static_cast<double>(k) * delta;
    if (c.is_float) std::const_pointer_cast<std::vector<float>>(c.f)->push_back(static_cast<float>(v));
    else c.i.push_back(static_cast<int64_t>(v));
  }
  c.dims = {count};
  bind_const(e, n, std::move(c));
}

// Equal of constants (a mask computed from a buffer, mask == 0): a
// constant of 0/1, with numpy broadcasting.
void op_equal(Env& e, const onnx::NodeProto& n) {
  if (!foldable(e, n.input(0)) || !foldable(e, n.input(1)))
    refuse(e.f, n, "compares tensors of the graph: memfit imports Equal on constants only (an attention mask)");
  const Const &a = constant(e, n, 0), &b = constant(e, n, 1);
  const Shape out = broadcast_dims(e, n, const_dims(a), const_dims(b));
  const std::vector<int64_t> ia = broadcast_index(const_dims(a), out), ib = broadcast_index(const_dims(b), out);
  Const r;
  r.dims = a.dims.empty() && b.dims.empty() ? Shape{} : out;
  for (size_t k = 0; k < ia.size(); ++k) r.i.push_back(const_at(a, ia[k]) == const_at(b, ib[k]));
  bind_const(e, n, std::move(r));
}

// Not of a constant (a comparison's negation in a mask's arithmetic): 1
// where it is 0, else 0.
void op_not(Env& e, const onnx::NodeProto& n) {
  if (!foldable(e, n.input(0))) refuse(e.f, n, "negates a tensor of the graph: memfit imports Not on constants only (a mask)");
  const Const& a = constant(e, n, 0);
  Const r;
  r.dims = a.dims;
  for (int64_t k = 0; k < a.size(); ++k) r.i.push_back(const_at(a, k) == 0);
  bind_const(e, n, std::move(r));
}

// Where(cond, x, y) of constants, with numpy broadcasting: a constant (a
// shape or mask computation; torch writes expand(-1) as Where(shape == -1,
// 1, shape)). Where on a tensor of the graph is an attention mask's only
// (onnx_patterns.cpp).
void op_where(Env& e, const onnx::NodeProto& n) {
  for (int k = 0; k < 3; ++k)
    if (!foldable(e, n.input(k)))
      refuse(e.f, n, "input '" + n.input(k) + "' is a tensor of the graph: memfit imports Where on constants, and "
                     "as an attention's mask");
  const Const &c = constant(e, n, 0), &x = constant(e, n, 1), &y = constant(e, n, 2);
  if (x.is_float != y.is_float) refuse(e.f, n, "chooses between a float and an integer constant");
  const Shape out = broadcast_dims(e, n, broadcast_dims(e, n, const_dims(c), const_dims(x)), const_dims(y));
  const std::vector<int64_t> ic = broadcast_index(const_dims(c), out), ix = broadcast_index(const_dims(x), out),
                             iy = broadcast_index(const_dims(y), out);
  Const r;
  r.dims = c.dims.empty() && x.dims.empty() && y.dims.empty() ? Shape{} : out;
  r.is_float = x.is_float;
  std::vector<float> f;
  for (size_t k = 0; k < ic.size(); ++k) {
    const bool take_x = const_at(c, ic[k]) != 0;
    if (r.is_float) f.push_back((*(take_x ? x : y).f)[static_cast<size_t>(take_x ? ix[k] : iy[k])]);
    else r.i.push_back((take_x ? x : y).i[static_cast<size_t>(take_x ? ix[k] : iy[k])]);
  }
  if (r.is_float) r.f = std::make_shared<std::vector<float>>(std::move(f));
  bind_const(e, n, std::move(r));
}

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

// Sqrt of a constant (a scale computed from a shape, 1 / sqrt(d) as an
// exported scaled_dot_product_attention writes it), folded; of a tensor of
// the graph, the activation (its derivative at 0 taken as 0).
void op_sqrt(Env& e, const onnx::NodeProto& n) {
  unary(e, n, "sqrt", [](double v) { return std::sqrt(v); }, [&](double v) {
    if (v < 0) refuse(e.f, n, "takes the square root of " + std::to_string(v));
  });
}

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

// Pow of constants (a scale computed from a shape); elsewhere only inside
// GELU's tanh form (onnx_patterns.cpp).
void op_pow(Env& e, const onnx::NodeProto& n) {
  if (!fold_arith(e, n)) refuse(e.f, n, "raises a tensor of the graph to a power: memfit imports Pow on constants and "
                                       "inside GELU only");
}

// Max and Min of constants (a shifted window's padding, max(0, w - H)):
// two inputs with broadcasting, or one (itself).
void op_max_min(Env& e, const onnx::NodeProto& n) {
  if (n.input_size() == 1 && foldable(e, n.input(0))) return bind_const(e, n, constant(e, n, 0));
  if (n.input_size() != 2 || !fold_arith(e, n))
    refuse(e.f, n, "takes the " + std::string(n.op_type() == "Max" ? "maximum" : "minimum") +
                       " of tensors of the graph, or of more than two: memfit imports " + n.op_type() +
                       " of two constants only");
}

Const scattered(Env& e, const onnx::NodeProto& n, Const r);
void scatter_into_tensor(Env& e, const onnx::NodeProto& n);

// ScatterND(data, indices, updates) of constants, no reduction (a mask
// built by slice assignment, Swin's shifted-window regions): a copy of data
// with the slices indices[..] names set from updates.
void op_scatter_nd(Env& e, const onnx::NodeProto& n) {
  if (attr_s(n, "reduction", "none") != "none") refuse(e.f, n, "reduction " + attr_s(n, "reduction", "") + " is not supported");
  if (!is_const(e, n.input(1)) || !foldable(e, n.input(2)))
    refuse(e.f, n, "scatters from a tensor of the graph: memfit imports ScatterND of constant updates only");
  if (!foldable(e, n.input(0))) return scatter_into_tensor(e, n);
  bind_const(e, n, scattered(e, n, constant(e, n, 0)));
}

// data with the slices indices[..] names set from the constant updates.
Const scattered(Env& e, const onnx::NodeProto& n, Const r) {
  const Const &ix = constant(e, n, 1), &up = constant(e, n, 2);
  if (ix.is_float) refuse(e.f, n, "has float indices");
  if (up.is_float != r.is_float) refuse(e.f, n, "updates differ from the data in type");
  const Shape ds = const_dims(r), is = const_dims(ix);
  if (is.empty() || is.back() < 1 || is.back() > static_cast<int64_t>(ds.size()))
    refuse(e.f, n, "indices " + shape_str(is) + " do not index data " + shape_str(ds));
  const auto k = static_cast<size_t>(is.back());
  int64_t slice = 1;  // the elements one index names
  for (size_t a = k; a < ds.size(); ++a) slice *= ds[a];
  const int64_t count = numel(is) / static_cast<int64_t>(k);
  if (up.size() != count * slice) refuse(e.f, n, "updates hold " + std::to_string(up.size()) + " numbers, not " + std::to_string(count * slice));
  std::vector<float> f = r.is_float ? *r.f : std::vector<float>{};
  for (int64_t j = 0; j < count; ++j) {
    int64_t off = 0;
    for (size_t a = 0; a < k; ++a) {
      int64_t v = ix.i[static_cast<size_t>(j) * k + a];
      if (v < -ds[a] || v >= ds[a]) refuse(e.f, n, "index " + std::to_string(v) + " is out of range for axis " + std::to_string(a) + " of " + shape_str(ds));
      off = off * ds[a] + (v < 0 ? v + ds[a] : v);
    }
    for (int64_t t = 0; t < slice; ++t) {
      const auto dst = static_cast<size_t>(off * slice + t), src = static_cast<size_t>(j * slice + t);
      if (r.is_float) f[dst] = (*up.f)[src];
      else r.i[dst] = up.i[src];
    }
  }
  if (r.is_float) r.f = std::make_shared<std::vector<float>>(std::move(f));
  return r;
}

// ScatterND of constant updates into a tensor of the graph (Swin-V2 zeroes
// the key part of its qkv bias, qkv_bias[C:2C] = 0, on a parameter):
// x * keep + placed, keep 0 where a slice is replaced and 1 elsewhere,
// placed the updates there and 0 elsewhere; the replaced elements pass no
// gradient back.
void scatter_into_tensor(Env& e, const onnx::NodeProto& n) {
  const ValueId x = value(e, n, 0);
  const Shape xs = shape_of(e, x);
  const Const& up = constant(e, n, 2);
  if (!up.is_float) refuse(e.f, n, "scatters integers into a float tensor");
  auto filled = [&](float v) {
    Const c;
    c.dims = xs;
    c.is_float = true;
    c.f = std::make_shared<std::vector<float>>(static_cast<size_t>(numel(xs)), v);
    return c;
  };
  const std::string zeros = n.output(0) + ":zero-updates", keep = n.output(0) + ":keep",
                    placed = n.output(0) + ":placed";
  // placed: the updates at their slices, 0 elsewhere; keep: 1, and 0 at the
  // slices (the same scatter, of zeros into ones).
  Const z = up;
  z.f = std::make_shared<std::vector<float>>(static_cast<size_t>(up.size()), 0.0f);
  e.consts[zeros] = std::move(z);
  onnx::NodeProto m = n;
  m.set_input(2, zeros);
  e.consts[keep] = scattered(e, m, filled(1.0f));
  e.consts[placed] = scattered(e, n, filled(0.0f));
  const std::string layer = layer_of(e, n);
  ValueId y = e.b.g.add1("binary", {x, value_named(e, n, keep)}, {{"kind", std::string("mul")}}, layer);
  bool any = false;
  for (float v : *e.consts.at(placed).f) any = any || v != 0.0f;
  if (any) y = e.b.g.add1("binary", {y, value_named(e, n, placed)}, {{"kind", std::string("add")}}, layer + ".placed");
  bind(e, n, y);
}


// Mod of constants (a window's padding, (w - W % w) % w, in a shifted-window
// attention's shape arithmetic).
void op_mod(Env& e, const onnx::NodeProto& n) {
  if (!fold_arith(e, n)) refuse(e.f, n, "takes a remainder of a tensor of the graph: memfit imports Mod on constants only");
}

// Ops imported only inside a pattern (onnx_patterns.cpp): reaching one
// here means the pattern around it did not match.
void op_pattern_only(Env& e, const onnx::NodeProto& n) {
  const std::string& op = n.op_type();
  if (op == "RandomUniformLike" || op == "Less")
    refuse(e.f, n, op + " is imported only as torchvision's stochastic depth: Div(Cast(Less(RandomUniformLike(zeros "
                        "[N, 1, ...]), s)), s) applied by a Mul");
  refuse(e.f, n, op + " is imported only inside GELU: x * 0.5 * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) or "
                 "x * 0.5 * (1 + Erf(x / sqrt(2))); export nn.GELU, or GELU's formula as torch writes it");
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

AttentionOpts attention_opts(Env& e, const AttentionMatch& m, int64_t T, int64_t S);

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

}  // namespace

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
      {"Tanh", {op_activation, {}}},  // also inside GELU's tanh form (onnx_patterns.cpp)
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
      {"Erf", {op_pattern_only, {}}},  // inside GELU only (onnx_patterns.cpp)
      {"RandomUniformLike", {op_pattern_only, {"dtype", "high", "low", "seed"}}},  // stochastic depth only
      {"Less", {op_pattern_only, {}, 2}},
      {"Pow", {op_pow, {}, 2}},
      {"Sqrt", {op_sqrt, {}}},
      {"Exp", {op_exp, {}}},
      {"ReduceL2", {op_reduce_l2, {"axes", "keepdims", "noop_with_empty_axes"}}},
      {"Where", {op_where, {}, 3}},  // on constants; on a graph tensor as attention's mask (onnx_patterns.cpp)
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
