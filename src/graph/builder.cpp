#include "memfit/builder.hpp"

#include <cmath>

#include "memfit/rng.hpp"

namespace memfit {
namespace {

ValueId make_param(Builder& b, const std::string& name, Shape s, InitSpec init, bool buffer = false) {
  ValueId v = buffer ? b.g.buffer(b.full(name), std::move(s)) : b.g.param(b.full(name), std::move(s));
  b.g.value(v).init = init;
  return v;
}

// Biases and norm scales/shifts: exempt from weight decay when the optimizer
// asks for parameter groups (OptimizerConfig::decay_bias_and_norm = false).
ValueId no_decay(Builder& b, ValueId v) { return no_weight_decay(b, v); }

// Largest kernel side the builder accepts: with channels up to 2^20 a
// weight's element count stays far inside int64.
constexpr int64_t kMaxKernel = 1024;

InitSpec uniform(double fan_in) { return {InitSpec::Uniform, 1.0 / std::sqrt(fan_in)}; }

}  // namespace

ValueId no_weight_decay(Builder& b, ValueId param) {
  if (b.g.value(param).cls != VClass::Param)
    throw GraphError("no_weight_decay: '" + b.g.value(param).name + "' is not a parameter");
  b.g.value(param).no_weight_decay = true;
  return param;
}

ValueId conv2d(Builder& b, ValueId x, int64_t out_channels, int64_t kernel, ConvOpts o) {
  const Shape& xs = b.g.value(x).shape;
  if (xs.size() != 4)
    throw GraphError("layer '" + b.full(o.name) + "' (conv2d): input must be [N, C, H, W], got " + shape_str(xs));
  int64_t cin = xs[1];
  if (out_channels < 1 || kernel < 1 || kernel > kMaxKernel || o.stride < 1 || o.pad < 0 || o.dilation < 1)
    throw GraphError("layer '" + b.full(o.name) + "' (conv2d): needs out channels >= 1, 1 <= kernel <= " +
                     std::to_string(kMaxKernel) + ", stride >= 1, pad >= 0, dilation >= 1 (got out " +
                     std::to_string(out_channels) + ", kernel " + std::to_string(kernel) + ", stride " +
                     std::to_string(o.stride) + ", pad " + std::to_string(o.pad) + ", dilation " +
                     std::to_string(o.dilation) + ")");
  if (o.groups < 1 || cin % o.groups)
    throw GraphError("layer '" + b.full(o.name) + "' (conv2d): input channels " + std::to_string(cin) +
                     " not divisible by groups " + std::to_string(o.groups));
  auto sc = b.scope(o.name);
  double fan_in = static_cast<double>(cin / o.groups) * static_cast<double>(kernel) * static_cast<double>(kernel);
  std::vector<ValueId> ins{x, make_param(b, "weight", {out_channels, cin / o.groups, kernel, kernel}, uniform(fan_in))};
  if (o.bias) ins.push_back(no_decay(b, make_param(b, "bias", {out_channels}, uniform(fan_in))));
  Attrs a{{"stride", Shape{o.stride, o.stride}},
          {"pad", Shape{o.pad, o.pad}},
          {"dilation", Shape{o.dilation, o.dilation}},
          {"groups", o.groups}};
  std::string layer = b.full("");
  layer.pop_back();
  return b.g.add1("conv2d", ins, a, layer);
}

ValueId linear(Builder& b, ValueId x, int64_t out_features, LinearOpts o) {
  const Shape& xs = b.g.value(x).shape;
  if (xs.empty()) throw GraphError("layer '" + b.full(o.name) + "' (linear): scalar input");
  int64_t in = xs.back();
  if (out_features < 1)
    throw GraphError("layer '" + b.full(o.name) + "' (linear): out features must be >= 1, got " + std::to_string(out_features));
  auto sc = b.scope(o.name);
  std::vector<ValueId> ins{x, make_param(b, "weight", {out_features, in}, uniform(static_cast<double>(in)))};
  if (o.bias) ins.push_back(no_decay(b, make_param(b, "bias", {out_features}, uniform(static_cast<double>(in)))));
  std::string layer = b.full("");
  layer.pop_back();
  return b.g.add1("linear", ins, {}, layer);
}

ValueId relu(Builder& b, ValueId x) { return b.g.add1("relu", {x}, {}, b.auto_name("relu")); }

static void check_pool(const char* op, int64_t k, const PoolOpts& o) {
  if (k < 1 || o.stride < 0 || o.pad < 0)
    throw GraphError(std::string(op) + ": needs window >= 1, stride >= 1 (0: the window) and pad >= 0 (got window " +
                     std::to_string(k) + ", stride " + std::to_string(o.stride) + ", pad " + std::to_string(o.pad) + ")");
}

ValueId max_pool2d(Builder& b, ValueId x, int64_t k, PoolOpts o) {
  check_pool("max_pool2d", k, o);
  int64_t s = o.stride ? o.stride : k;
  return b.g.add_node("max_pool2d", {x}, {{"kernel", Shape{k, k}}, {"stride", Shape{s, s}}, {"pad", Shape{o.pad, o.pad}}},
                      b.auto_name("maxpool"))[0];
}

ValueId avg_pool2d(Builder& b, ValueId x, int64_t k, PoolOpts o) {
  check_pool("avg_pool2d", k, o);
  int64_t s = o.stride ? o.stride : k;
  return b.g.add1("avg_pool2d", {x},
                  {{"kernel", Shape{k, k}},
                   {"stride", Shape{s, s}},
                   {"pad", Shape{o.pad, o.pad}},
                   {"count_include_pad", int64_t(o.count_include_pad)}},
                  b.auto_name("avgpool"));
}

ValueId global_avg_pool(Builder& b, ValueId x) { return b.g.add1("global_avg_pool", {x}, {}, b.auto_name("avgpool")); }

ValueId batch_norm(Builder& b, ValueId x, BatchNormOpts o) {
  const Shape& xs = b.g.value(x).shape;
  if (xs.size() < 2) throw GraphError("layer '" + b.full(o.name) + "' (batch_norm): input needs a channel axis");
  int64_t c = xs[1];
  auto sc = b.scope(o.name);
  ValueId gamma = no_decay(b, make_param(b, "weight", {c}, {InitSpec::Ones, 0}));
  ValueId beta = no_decay(b, make_param(b, "bias", {c}, {InitSpec::Zeros, 0}));
  ValueId rm = make_param(b, "running_mean", {c}, {InitSpec::Zeros, 0}, true);
  ValueId rv = make_param(b, "running_var", {c}, {InitSpec::Ones, 0}, true);
  std::string layer = b.full("");
  layer.pop_back();
  return b.g.add_node("batch_norm", {x, gamma, beta, rm, rv},
                      {{"eps", o.eps}, {"momentum", o.momentum}, {"training", int64_t(b.training)}}, layer)[0];
}

ValueId dropout(Builder& b, ValueId x, double p, const std::string& name) {
  if (!b.training || p == 0.0) return x;  // identity in eval mode
  std::string layer = b.full(name);
  return b.g.add_node("dropout", {x}, {{"p", p}, {"stream", static_cast<int64_t>(rng::name_hash(layer))}}, layer)[0];
}

ValueId add(Builder& b, ValueId a, ValueId c) { return b.g.add1("add", {a, c}, {}, b.auto_name("add")); }

ValueId add_broadcast(Builder& b, ValueId a, ValueId c) {
  return b.g.add1("add_broadcast", {a, c}, {}, b.auto_name("add_broadcast"));
}

ValueId gather_rows(Builder& b, ValueId table, Shape rows) {
  return b.g.add1("gather_rows", {table}, {{"rows", std::move(rows)}}, b.auto_name("gather_rows"));
}

ValueId expand_leading(Builder& b, ValueId x, Shape shape) {
  return b.g.add1("expand_leading", {x}, {{"shape", std::move(shape)}}, b.auto_name("expand_leading"));
}

ValueId cast(Builder& b, ValueId x, DType dtype) {
  return b.g.add1("cast", {x}, {{"dtype", int64_t(dtype)}}, b.auto_name("cast"));
}

ValueId flatten(Builder& b, ValueId x) {
  const Shape& s = b.g.value(x).shape;
  return reshape(b, x, {s.at(0), numel(s) / s.at(0)});
}

ValueId reshape(Builder& b, ValueId x, Shape shape) {
  return b.g.add1("reshape", {x}, {{"shape", std::move(shape)}}, b.auto_name("reshape"));
}

ValueId slice(Builder& b, ValueId x, int64_t axis, int64_t start, int64_t len) {
  return b.g.add1("slice", {x}, {{"axis", axis}, {"start", start}, {"len", len}}, b.auto_name("slice"));
}

ValueId concat(Builder& b, const std::vector<ValueId>& xs, int64_t axis) {
  return b.g.add1("concat", xs, {{"axis", axis}}, b.auto_name("concat"));
}

ValueId matmul(Builder& b, ValueId a, ValueId c, bool ta, bool tb) {
  return b.g.add1("matmul", {a, c}, {{"trans_a", int64_t(ta)}, {"trans_b", int64_t(tb)}}, b.auto_name("matmul"));
}

ValueId softmax_xent(Builder& b, ValueId logits, ValueId labels, double s) {
  return b.g.add_node("softmax_xent", {logits, labels}, {{"smoothing", s}}, "loss")[0];
}

ValueId xent_rows(Builder& b, ValueId logits, ValueId targets, double s) {
  return b.g.add_node("xent_rows", {logits, targets}, {{"smoothing", s}}, "loss")[0];
}

XentMetrics xent_metrics(Builder& b, ValueId logits, ValueId labels) {
  const auto o = b.g.add_node("xent_metrics", {logits, labels}, {}, "metrics");
  return {o[0], o[1], o[2]};
}

ValueId embedding(Builder& b, ValueId ids, int64_t vocab, int64_t dim, EmbeddingOpts o) {
  if (vocab < 1 || dim < 1 || !(o.init_std >= 0))
    throw GraphError("layer '" + b.full(o.name) + "' (embedding): needs vocab >= 1, dim >= 1 and init_std >= 0 (got vocab " +
                     std::to_string(vocab) + ", dim " + std::to_string(dim) + ", init_std " + std::to_string(o.init_std) + ")");
  auto sc = b.scope(o.name);
  const ValueId table = make_param(b, "weight", {vocab, dim}, {InitSpec::Uniform, std::sqrt(3.0) * o.init_std});
  std::string layer = b.full("");
  layer.pop_back();
  return b.g.add1("embedding", {ids, table}, {{"dtype", int64_t(o.dtype)}}, layer);
}

ValueId permute(Builder& b, ValueId x, std::vector<int64_t> perm) {
  const auto r = static_cast<int64_t>(b.g.value(x).shape.size());
  for (int64_t& p : perm)
    if (p < 0) p += r;  // out of range either way: shape inference names it
  return b.g.add1("permute", {x}, {{"perm", std::move(perm)}}, b.auto_name("permute"));
}

ValueId transpose(Builder& b, ValueId x, int64_t a0, int64_t a1) {
  const auto r = static_cast<int64_t>(b.g.value(x).shape.size());
  const std::string layer = b.auto_name("transpose");
  if (a0 < 0) a0 += r;
  if (a1 < 0) a1 += r;
  if (a0 < 0 || a0 >= r || a1 < 0 || a1 >= r)
    throw GraphError("layer '" + layer + "' (permute): cannot swap axes " + std::to_string(a0) + " and " +
                     std::to_string(a1) + " of " + shape_str(b.g.value(x).shape));
  std::vector<int64_t> perm(static_cast<size_t>(r));
  for (int64_t k = 0; k < r; ++k) perm[static_cast<size_t>(k)] = k;
  std::swap(perm[static_cast<size_t>(a0)], perm[static_cast<size_t>(a1)]);
  return b.g.add1("permute", {x}, {{"perm", std::move(perm)}}, layer);
}
ValueId layer_norm(Builder& b, ValueId x, LayerNormOpts o) {
  const Shape& xs = b.g.value(x).shape;
  if (xs.empty()) throw GraphError("layer '" + b.full(o.name) + "' (layer_norm): input needs a last axis, got a scalar");
  const int64_t d = xs.back();
  auto sc = b.scope(o.name);
  ValueId gamma = no_decay(b, make_param(b, "weight", {d}, {InitSpec::Ones, 0}));
  ValueId beta = no_decay(b, make_param(b, "bias", {d}, {InitSpec::Zeros, 0}));
  std::string layer = b.full("");
  layer.pop_back();
  return b.g.add_node("layer_norm", {x, gamma, beta}, {{"eps", o.eps}}, layer)[0];
}

ValueId gelu(Builder& b, ValueId x, bool tanh) {
  return b.g.add1("gelu", {x}, {{"approximate", std::string(tanh ? "tanh" : "none")}}, b.auto_name("gelu"));
}

ValueId activation(Builder& b, ValueId x, const std::string& kind, Attrs params) {
  params.set("kind", kind);
  return b.g.add1("activation", {x}, params, b.auto_name(kind));
}

ValueId binary(Builder& b, ValueId x, ValueId y, const std::string& kind) {
  return b.g.add1("binary", {x, y}, {{"kind", kind}}, b.auto_name(kind));
}

ValueId to_activations(Builder& b, ValueId x) {
  return b.g.value(x).dtype == b.activations || !is_float(b.g.value(x).dtype) ? x : cast(b, x, b.activations);
}

ValueId softmax(Builder& b, ValueId x) { return b.g.add1("softmax", {x}, {}, b.auto_name("softmax")); }

namespace {

ValueId add_attention(Builder& b, std::vector<ValueId> ins, int64_t D, const std::string& layout, const AttentionOpts& o,
                      const std::string& layer) {
  const double scale = o.scale > 0.0 ? o.scale : 1.0 / std::sqrt(static_cast<double>(D));
  if (o.mask != kNone) ins.push_back(o.mask);
  Attrs a{{"causal", int64_t(o.causal)},
          {"scale", scale},
          {"dropout", b.training ? o.dropout : 0.0},
          {"stream", static_cast<int64_t>(rng::name_hash(layer))}};
  if (layout != "bhtd") a.set("layout", layout);
  return b.g.add_node("attention", std::move(ins), std::move(a), layer)[0];
}

}  // namespace

ValueId attention(Builder& b, ValueId q, ValueId k, ValueId v, AttentionOpts o) {
  const std::string layer = b.full(o.name);
  const Shape& qs = b.g.value(q).shape;
  if (qs.size() != 4 || qs[3] < 1)
    throw GraphError("layer '" + layer + "' (attention): q must be " +
                     (o.layout == "bthd" ? "[B, T, H, D]" : "[B, H, T, D]") + ", got " + shape_str(qs));
  return add_attention(b, {q, k, v}, qs[3], o.layout, o, layer);
}

ValueId attention_packed(Builder& b, ValueId qkv, AttentionOpts o) {
  const std::string layer = b.full(o.name);
  const Shape& s = b.g.value(qkv).shape;
  if (s.size() != 5 || s[2] != 3 || s[4] < 1)
    throw GraphError("layer '" + layer + "' (attention): qkv must be [B, T, 3, H, D], got " + shape_str(s));
  return add_attention(b, {qkv}, s[4], "packed", o, layer);
}

}  // namespace memfit
