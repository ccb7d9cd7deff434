#include "models/gpt.hpp"

#include <cmath>

namespace memfit::models {
namespace {

// GPT-2's initialisation, N(0, std^2), as the uniform of the same variance
// (memfit's initialisers are uniform): U(-sqrt(3) std, sqrt(3) std).
InitSpec normal_like(double std) { return {InitSpec::Uniform, std::sqrt(3.0) * std, nullptr}; }

ValueId param(Builder& b, const std::string& name, Shape s, InitSpec init) {
  const ValueId v = b.g.param(b.full(name), std::move(s));
  b.g.value(v).init = init;
  return v;
}

// GPT-2's Conv1D: y = x W + b with W stored [in, out].
ValueId conv1d(Builder& b, ValueId x, int64_t out, const std::string& name, double std, bool bias) {
  auto sc = b.scope(name);
  const int64_t in = b.g.value(x).shape.back();
  ValueId y = matmul(b, x, param(b, "weight", {in, out}, normal_like(std)));
  if (bias) y = add_broadcast(b, y, no_weight_decay(b, param(b, "bias", {out}, {InitSpec::Zeros, 0, nullptr})));
  return y;
}

ValueId norm(Builder& b, ValueId x, const std::string& name, bool bias) {
  // layer_norm always has a shift; without bias it stays at its zero init
  // and is frozen (GPT-2 configs with bias=False have none).
  const ValueId y = layer_norm(b, x, {.eps = 1e-5, .name = name});
  if (!bias) b.g.value(b.g.find(b.full(name + ".bias"))).trainable = false;
  return y;
}

ValueId block(Builder& b, ValueId h, const GptConfig& c, int64_t T, int64_t B) {
  const int64_t C = c.n_embd, H = c.n_head, D = C / H;
  // Residual projections scaled by 1/sqrt(2 n_layer), as GPT-2.
  const double std = 0.02, proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  ValueId a = norm(b, h, "ln_1", c.bias);
  {
    auto sc = b.scope("attn");
    const ValueId qkv = conv1d(b, a, 3 * C, "c_attn", std, c.bias);  // [B, T, 3C]: q, k, v side by side
    // The heads read where c_attn wrote them, and written where c_proj reads
    // them: no permute copies (reshapes are views).
    ValueId y = attention_packed(b, reshape(b, qkv, {B, T, 3, H, D}),
                                 {.causal = true, .dropout = c.dropout, .name = "attn"});
    y = reshape(b, y, {B, T, C});
    a = conv1d(b, y, C, "c_proj", proj_std, c.bias);
  }
  if (c.dropout > 0) a = dropout(b, a, c.dropout, "resid_dropout");
  h = add(b, h, a);
  ValueId m = norm(b, h, "ln_2", c.bias);
  {
    auto sc = b.scope("mlp");
    m = conv1d(b, m, 4 * C, "c_fc", std, c.bias);
    m = gelu(b, m, /*tanh=*/true);
    m = conv1d(b, m, C, "c_proj", proj_std, c.bias);
  }
  if (c.dropout > 0) m = dropout(b, m, c.dropout, "mlp_dropout");
  return add(b, h, m);
}

// The trunk: token and position embeddings, the blocks, the final norm.
ValueId transformer(Builder& b, ValueId tokens, const GptConfig& c, int64_t V) {
  const Shape& ts = b.g.value(tokens).shape;  // [B, T]
  const int64_t B = ts[0], T = ts[1];
  auto sc = b.scope("transformer");
  ValueId h = embedding(b, tokens, V, c.n_embd, {.name = "wte", .init_std = 0.02});
  ValueId wpe;
  {
    auto ps = b.scope("wpe");
    wpe = param(b, "weight", {c.block_size, c.n_embd}, normal_like(0.02));
  }
  h = to_activations(b, add_broadcast(b, h, T == c.block_size ? wpe : slice(b, wpe, 0, 0, T)));
  if (c.dropout > 0) h = dropout(b, h, c.dropout, "drop");
  {
    auto hs = b.scope("h");
    for (int64_t l = 0; l < c.n_layer; ++l) {
      auto ls = b.scope(std::to_string(l));
      h = block(b, h, c, T, B);
    }
  }
  return norm(b, h, "ln_f", c.bias);
}

}  // namespace

Model gpt(const std::string& name, const GptConfig& c) {
  if (c.n_layer < 1 || c.n_head < 1 || c.n_embd < 1 || c.n_embd % c.n_head || c.block_size < 1)
    throw GraphError("model '" + name + "': n_embd must be a positive multiple of n_head, and n_layer, block_size >= 1");
  Model m;
  m.name = name;
  m.inputs = {{"tokens", DType::i32, 1, "[T]"}};
  m.target = {"targets", DType::i32, 1, "[T]"};
  m.task = Task::LanguageModel;
  m.max_sequence = c.block_size;
  m.build = [name, c](Builder& b, const Inputs& in, int64_t classes) {
    const ValueId tokens = in.at("tokens");
    const int64_t T = b.g.value(tokens).shape[1];  // [B, T]
    const int64_t data_vocab = in.spec("tokens").range > 0 ? in.spec("tokens").range : classes;
    const int64_t V = c.vocab_size > 0 ? c.vocab_size : data_vocab;
    if (T > c.block_size)
      throw GraphError("model '" + name + "' takes sequences of at most " + std::to_string(c.block_size) +
                       " tokens (block_size); the data's are " + std::to_string(T));
    if (data_vocab > V)
      throw GraphError("model '" + name + "' has a vocabulary of " + std::to_string(V) + "; the data's tokens take " +
                       std::to_string(data_vocab) + " values");
    const ValueId h = transformer(b, tokens, c, V);
    const ValueId wte = b.g.find(b.full("transformer.wte.weight"));
    // The head (lm_head, as Hugging Face's GPT2LMHeadModel calls it) is the
    // token table, transposed: its gradient adds to the embedding's (weight
    // tying), and it holds no parameter of its own.
    auto hs = b.scope("lm_head");
    return matmul(b, h, wte, false, true);  // [B, T, V]
  };
  return m;
}

namespace {

std::optional<GptConfig> gpt_preset(const std::string& name) {
  if (name == "gpt-tiny") return GptConfig{.n_layer = 2, .n_head = 2, .n_embd = 32, .block_size = 64};
  if (name == "gpt-char" || name == "gpt")
    return GptConfig{.n_layer = 6, .n_head = 6, .n_embd = 384, .block_size = 256, .dropout = 0.2};
  // GPT-2 and its larger sizes, as Hugging Face's gpt2, gpt2-medium and
  // gpt2-large configs (their weights load with --init-from).
  if (name == "gpt2") return GptConfig{.n_layer = 12, .n_head = 12, .n_embd = 768, .block_size = 1024, .vocab_size = 50257};
  if (name == "gpt2-medium")
    return GptConfig{.n_layer = 24, .n_head = 16, .n_embd = 1024, .block_size = 1024, .vocab_size = 50257};
  if (name == "gpt2-large")
    return GptConfig{.n_layer = 36, .n_head = 20, .n_embd = 1280, .block_size = 1024, .vocab_size = 50257};
  return std::nullopt;
}

}  // namespace

std::optional<Model> find_gpt(const std::string& name, std::optional<double> dropout) {
  std::optional<GptConfig> c = gpt_preset(name);
  if (!c) return std::nullopt;
  if (dropout) c->dropout = *dropout;
  return gpt(name, *c);
}

std::vector<std::string> gpt_names() { return {"gpt-tiny", "gpt-char", "gpt2", "gpt2-medium", "gpt2-large"}; }

}  // namespace memfit::models
