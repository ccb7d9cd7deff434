// The C++ builder: model code that reads like the model.
//
//   Builder b(g);
//   x = conv2d(b, x, 32, 5, {.pad = 2, .name = "conv1"});
//   x = relu(b, x);
//   x = max_pool2d(b, x, 2);
//
// Parameter names follow PyTorch's state_dict naming ("layer1.0.conv1.weight"),
// built from the scope prefix and each layer's name, so weights move between
// the two as they are.
#pragma once

#include <string>
#include <vector>

#include "memfit/graph.hpp"

namespace memfit {

class Builder {
 public:
  explicit Builder(Graph& g, bool training = true) : g(g), training(training) { g.training = training; }
  Graph& g;
  bool training;
  // The type activations are stored in (the precision policy). A model
  // whose inputs are token ids casts its embedding stream into it with
  // to_activations; float inputs are cast on entry by the step graph.
  DType activations = DType::f32;

  // RAII scope: names created inside get "name." prepended.
  class Scope {
   public:
    Scope(Builder& b, const std::string& name) : b_(b), saved_(b.prefix_) { b.prefix_ += name + "."; }
    ~Scope() { b_.prefix_ = saved_; }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Builder& b_;
    std::string saved_;
  };
  Scope scope(const std::string& name) { return Scope(*this, name); }

  std::string full(const std::string& name) const { return prefix_ + name; }
  // A name for a parameter-free layer: "<prefix><kind><counter>".
  std::string auto_name(const std::string& kind) { return prefix_ + kind + std::to_string(counter_++); }

 private:
  std::string prefix_;
  int counter_ = 0;
};

struct ConvOpts {
  int64_t stride = 1, pad = 0, dilation = 1, groups = 1;
  bool bias = true;
  std::string name = "conv";
};
struct LinearOpts {
  bool bias = true;
  std::string name = "fc";
};
struct PoolOpts {
  int64_t stride = 0;  // 0: same as the window
  int64_t pad = 0;
  bool count_include_pad = true;  // avg pool only
};
struct BatchNormOpts {
  double eps = 1e-5, momentum = 0.1;
  std::string name = "bn";
};

ValueId conv2d(Builder& b, ValueId x, int64_t out_channels, int64_t kernel, ConvOpts o = {});
ValueId linear(Builder& b, ValueId x, int64_t out_features, LinearOpts o = {});
ValueId relu(Builder& b, ValueId x);
ValueId max_pool2d(Builder& b, ValueId x, int64_t kernel, PoolOpts o = {});
ValueId avg_pool2d(Builder& b, ValueId x, int64_t kernel, PoolOpts o = {});
ValueId global_avg_pool(Builder& b, ValueId x);  // [N, C, H, W] -> [N, C]
ValueId batch_norm(Builder& b, ValueId x, BatchNormOpts o = {});
ValueId dropout(Builder& b, ValueId x, double p, const std::string& name = "dropout");
ValueId add(Builder& b, ValueId a, ValueId c);
// a + c with c broadcast over a's leading axes (c's shape: a's trailing axes).
ValueId add_broadcast(Builder& b, ValueId a, ValueId c);
// The rows of table [V, ...] at constant positions (each in [0, V)):
// [rows.size(), ...] (a relative position bias read by an index buffer).
ValueId gather_rows(Builder& b, ValueId table, Shape rows);
// x repeated over new leading axes: shape is [R..., x's shape] (a class
// token's [1, D] -> [N, 1, D], torch's expand); its gradient sums them.
ValueId expand_leading(Builder& b, ValueId x, Shape shape);
// x converted to dtype (round to nearest even when narrowing).
ValueId cast(Builder& b, ValueId x, DType dtype);
ValueId flatten(Builder& b, ValueId x);  // [N, ...] -> [N, rest]
ValueId reshape(Builder& b, ValueId x, Shape shape);
ValueId concat(Builder& b, const std::vector<ValueId>& xs, int64_t axis);
// x[..., start:start+len, ...] along axis.
ValueId slice(Builder& b, ValueId x, int64_t axis, int64_t start, int64_t len);
ValueId matmul(Builder& b, ValueId a, ValueId c, bool trans_a = false, bool trans_b = false);
// Marks a parameter as exempt from weight decay when the optimizer keeps
// biases and norms undecayed (OptimizerConfig::decay_bias_and_norm = false;
// Value::no_weight_decay). The builder marks biases and batch/layer norm
// scales and shifts itself; a model marks its own others. Returns param.
ValueId no_weight_decay(Builder& b, ValueId param);
// Mean softmax cross-entropy; labels are i32 [N].
ValueId softmax_xent(Builder& b, ValueId logits, ValueId labels, double label_smoothing = 0.0);
// Evaluation metrics of logits [..., C] against labels [...] (negative:
// padding, not counted): f32 [1] sums over the counted rows.
struct XentMetrics {
  ValueId loss_sum, correct, count;
};
XentMetrics xent_metrics(Builder& b, ValueId logits, ValueId labels);
// Mean cross-entropy over rows of logits [..., V] (f32) against targets
// [...] (i32; negative: padding, not counted, no gradient), with optional
// label smoothing; 0 when every row is padding. Saves only the rows'
// log-sum-exp; its backward writes dlogits over the logits (ops/xent_rows/
// op.cpp): for large vocabularies, where softmax_xent's [N, C]
// probabilities would double the logits' memory.
ValueId xent_rows(Builder& b, ValueId logits, ValueId targets, double label_smoothing = 0.0);

// embedding: rows of a table [vocab, dim] (parameter "<name>.weight") gathered
// by i32 ids [...] -> [..., dim]. The output is stored as `dtype` (f32 or
// bf16). Initialised U(-sqrt(3) std, sqrt(3) std): the variance of PyTorch's
// N(0, std^2) (std 1 is nn.Embedding's default; GPT-2 uses 0.02). Ids must lie
// in [0, vocab): an out-of-range id's row is NaN (ops/embedding/params.hpp).
struct EmbeddingOpts {
  std::string name = "embed";
  DType dtype = DType::f32;
  double init_std = 1.0;
};
ValueId embedding(Builder& b, ValueId ids, int64_t vocab, int64_t dim, EmbeddingOpts o = {});
// x's axes reordered: the result's axis k is x's axis perm[k] (negative
// entries count from the end).
ValueId permute(Builder& b, ValueId x, std::vector<int64_t> perm);
// x with axes a0 and a1 swapped (a permute).
ValueId transpose(Builder& b, ValueId x, int64_t a0, int64_t a1);
// Transformer layers, over the last axis of an N-d input.
struct LayerNormOpts {
  double eps = 1e-5;
  std::string name = "ln";
};
// Layer normalisation over the last axis D, with parameters "<name>.weight"
// (gamma, ones) and "<name>.bias" (beta, zeros), both [D], as PyTorch's
// nn.LayerNorm(D) names them.
ValueId layer_norm(Builder& b, ValueId x, LayerNormOpts o = {});
// GELU: tanh = true is GPT-2's tanh approximation, false the exact erf form
// (BERT), as F.gelu(approximate='tanh' / 'none').
ValueId gelu(Builder& b, ValueId x, bool tanh = false);
// A pointwise activation (ops/activation/op.cpp): kind "sigmoid", "tanh",
// "silu", "hardswish"; "clip" with attrs min and max (relu6: 0 and 6);
// "hardsigmoid" (alpha, beta; default PyTorch's 1/6 and 1/2); "leaky_relu"
// (alpha, default 0.01); "elu" (alpha, default 1). E.g.
// activation(b, x, "clip", {{"min", 0.0}, {"max", 6.0}}).
ValueId activation(Builder& b, ValueId x, const std::string& kind, Attrs params = {});
// x (kind) y element-wise with numpy broadcasting (ops/binary/op.cpp): kind
// "add", "sub", "mul" or "div"; e.g. squeeze-and-excitation's
// binary(b, x, s, "mul") with s [N, C, 1, 1] over x [N, C, H, W].
ValueId binary(Builder& b, ValueId x, ValueId y, const std::string& kind);
// Softmax over the last axis.
ValueId softmax(Builder& b, ValueId x);

// x in b.activations' type: a cast where it differs (the embedding sum of a
// token model, which gathers f32 rows of its tables), else x itself.
ValueId to_activations(Builder& b, ValueId x);

// Scaled dot-product attention as one fused op (ops/attention/op.cpp):
// q [B, H, T, D], k [B, H, S, D], v [B, H, S, Dv] -> [B, H, T, Dv]. causal:
// query i attends keys j <= i + (S - T); mask: an i32 [B, S] key mask
// (nonzero attends, kNone: none); scale <= 0: 1/sqrt(D); dropout: p on the
// probabilities, counter-based (off in an evaluation builder). Neither pass
// stores the [T, S] probabilities. A query row left with no key gives 0.
// layout "bthd": q [B, T, H, D], k [B, S, H, D], v [B, S, H, Dv] -> [B, T,
// H, Dv], the heads of a Linear's [B, T, H D] output read where they are (no
// permute copies on either side).
struct AttentionOpts {
  bool causal = false;
  double dropout = 0.0;
  ValueId mask = kNone;
  double scale = 0.0;
  std::string name = "attn";
  std::string layout = "bhtd";  // bhtd | bthd
};
ValueId attention(Builder& b, ValueId q, ValueId k, ValueId v, AttentionOpts o = {});
// The same on one fused projection's output: qkv [B, T, 3, H, D] (q, k, v
// side by side, T = S) -> [B, T, H, D]; its gradient comes back in that
// layout too (o.layout is ignored).
ValueId attention_packed(Builder& b, ValueId qkv, AttentionOpts o = {});
// LSTM (PyTorch nn.LSTM, batch_first, gate order i, f, g, o, h0 = c0 = 0):
// x [N, T, I] -> y [N, T, hidden] of the last layer, and every layer's state
// at each sequence's own last step. `layers` layers are chained (layer k reads
// layer k-1's y). Parameters "<name>.weight_ih_l<k>" [4H, in],
// ".weight_hh_l<k>" [4H, H], ".bias_ih_l<k>", ".bias_hh_l<k>" [4H], all
// U(-1/sqrt(H), 1/sqrt(H)) as PyTorch. lengths (i32 [N], optional): sample n
// runs its first lengths[n] steps (clamped to [0, T]); y is 0 after them, as
// a packed sequence's padded output (src/ops/lstm/op.cpp).
struct LstmOpts {
  int64_t layers = 1;
  std::string name = "lstm";
  ValueId lengths = kNone;
};
struct LstmOut {
  ValueId y = kNone;
  std::vector<ValueId> h_last, c_last;  // per layer, [N, hidden]
};
LstmOut lstm(Builder& b, ValueId x, int64_t hidden, LstmOpts o = {});

}  // namespace memfit
