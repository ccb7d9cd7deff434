// ONNX layers as memfit ops: convolution, linear and matrix products,
// activations, pooling, reductions, normalisation, softmax, dropout
// (models/onnx/convert.hpp).
#include <algorithm>
#include <cmath>
#include <limits>

#include "models/onnx/convert.hpp"

namespace memfit::models::onnx_import {

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

}  // namespace memfit::models::onnx_import
