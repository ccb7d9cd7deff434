#include "models/bert.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <type_traits>

namespace memfit::models {
namespace {

namespace fs = std::filesystem;

// BERT's initialisation (BertPreTrainedModel._init_weights): N(0, 0.02)
// weights and tables, as the uniform of the same variance (memfit's
// initialisers are uniform); zero biases, unit layer-norm gains.
constexpr double kInitStd = 0.02;
InitSpec normal_like(double std) { return {InitSpec::Uniform, std::sqrt(3.0) * std, nullptr}; }

ValueId param(Builder& b, const std::string& name, Shape s, InitSpec init) {
  const ValueId v = b.g.param(b.full(name), std::move(s));
  b.g.value(v).init = init;
  return v;
}

// nn.Linear: y = x W^T + b, W stored [out, in] as Hugging Face saves it. The
// linear op is exactly that product (matmul with trans_b) with the bias
// fused, over any leading axes.
ValueId dense(Builder& b, ValueId x, int64_t out, const std::string& name) {
  auto sc = b.scope(name);
  const int64_t in = b.g.value(x).shape.back();
  const ValueId w = param(b, "weight", {out, in}, normal_like(kInitStd));
  const ValueId bias = no_weight_decay(b, param(b, "bias", {out}, {InitSpec::Zeros, 0, nullptr}));
  std::string layer = b.full("");
  layer.pop_back();
  return b.g.add1("linear", {x, w, bias}, {}, layer);
}

ValueId norm(Builder& b, ValueId x, const BertConfig& c) {
  return layer_norm(b, x, {.eps = c.layer_norm_eps, .name = "LayerNorm"});
}

ValueId neg(Builder& b, ValueId x) { return b.g.add1("scale", {x}, {{"alpha", -1.0}}, b.auto_name("neg")); }

void check(const BertConfig& c) {
  if (c.vocab_size < 1 || c.hidden < 1 || c.layers < 1 || c.heads < 1 || c.hidden % c.heads || c.intermediate < 1 ||
      c.max_position < 1 || c.type_vocab_size < 1 || !(c.layer_norm_eps > 0) || !(c.hidden_dropout >= 0) ||
      !(c.hidden_dropout < 1) || !(c.attention_dropout >= 0) || !(c.attention_dropout < 1))
    throw GraphError("bert: hidden must be a positive multiple of heads; vocab_size, layers, intermediate, "
                     "max_position, type_vocab_size >= 1; layer_norm_eps > 0; dropouts in [0, 1)");
}

// word + position + token type, LayerNorm, dropout: [B, T, C].
ValueId embeddings(Builder& b, const BertConfig& c, const BertInputs& in, int64_t T) {
  auto sc = b.scope("embeddings");
  const int64_t C = c.hidden;
  ValueId h = embedding(b, in.tokens, c.vocab_size, C, {.name = "word_embeddings", .init_std = kInitStd});
  if (in.token_type_ids != kNone) {
    h = add(b, h, embedding(b, in.token_type_ids, c.type_vocab_size, C, {.name = "token_type_embeddings", .init_std = kInitStd}));
  } else {
    // Absent token types are all 0 (BertModel's default): row 0 of the
    // table, broadcast; the table keeps its name so a checkpoint still loads.
    ValueId table;
    {
      auto ts = b.scope("token_type_embeddings");
      table = param(b, "weight", {c.type_vocab_size, C}, normal_like(kInitStd));
    }
    h = add_broadcast(b, h, reshape(b, slice(b, table, 0, 0, 1), {C}));
  }
  ValueId pos;
  {
    auto ps = b.scope("position_embeddings");
    pos = param(b, "weight", {c.max_position, C}, normal_like(kInitStd));
  }
  // Positions 0..T-1 (BertModel's position_ids), whatever the padding.
  h = to_activations(b, add_broadcast(b, h, T == c.max_position ? pos : slice(b, pos, 0, 0, T)));
  h = norm(b, h, c);
  return dropout(b, h, c.hidden_dropout, "dropout");
}

ValueId layer(Builder& b, ValueId h, const BertConfig& c, ValueId mask, int64_t B, int64_t T) {
  const int64_t C = c.hidden, H = c.heads, D = C / H;
  {
    auto as = b.scope("attention");
    ValueId ctx;
    {
      auto ss = b.scope("self");
      // [B, T, H, D]: the heads read where the projections wrote them.
      auto heads = [&](const std::string& name) { return reshape(b, dense(b, h, C, name), {B, T, H, D}); };
      const ValueId q = heads("query"), k = heads("key"), v = heads("value");
      // Scores scaled by 1/sqrt(D); padded keys (mask 0) take no weight.
      const ValueId y = attention(b, q, k, v,
                                  {.dropout = c.attention_dropout, .mask = mask, .name = "attn", .layout = "bthd"});
      ctx = reshape(b, y, {B, T, C});
    }
    auto os = b.scope("output");
    const ValueId a = dropout(b, dense(b, ctx, C, "dense"), c.hidden_dropout, "dropout");
    h = norm(b, add(b, a, h), c);  // post-LN: the norm after the residual sum
  }
  ValueId m;
  {
    auto is = b.scope("intermediate");
    m = gelu(b, dense(b, h, c.intermediate, "dense"), /*tanh=*/false);
  }
  auto os = b.scope("output");
  m = dropout(b, dense(b, m, C, "dense"), c.hidden_dropout, "dropout");
  return norm(b, add(b, m, h), c);
}

// A JSON field of a config file, with a message naming both on a miss.
template <class T>
T field(const nlohmann::json& j, const std::string& file, const char* key, std::optional<T> dflt = std::nullopt) {
  if (!j.contains(key)) {
    if (dflt) return *dflt;
    throw std::runtime_error(file + ": no field '" + key + "' (a Hugging Face BERT config.json has it)");
  }
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw std::runtime_error(file + ": field '" + key + "' is " + j.at(key).dump() + ", not a " +
                             (std::is_same_v<T, bool>            ? "true or false"
                              : std::is_floating_point_v<T> ? "number"
                              : std::is_integral_v<T>       ? "whole number"
                                                            : "string"));
  }
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  if (!f) throw std::runtime_error(p.string() + ": cannot read it (a Hugging Face BERT config.json)");
  try {
    return nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(p.string() + ": not valid JSON (" + e.what() + ")");
  }
}

}  // namespace

ValueId mean_pool(Builder& b, ValueId h, ValueId mask) {
  const Shape s = b.g.value(h).shape;
  if (s.size() != 3) throw GraphError("mean_pool: needs h [B, T, C], got " + shape_str(s));
  const int64_t B = s[0], T = s[1], C = s[2];
  // The masked mean is attention whose scores are all equal: with q = k = 0
  // every attended key weighs 1 / (its count), padded keys 0, and a row
  // with no key gives 0 (sentence-transformers' sum / max(count, 1e-9)).
  // The attention op holds all of that, its backward and its bf16 path,
  // with no [B, T] weights stored; q and k are a few zeros.
  auto zeros = [&](Shape shape) {
    const ValueId z = b.g.add1("fill", {}, {{"shape", std::move(shape)}, {"value", 0.0}}, b.auto_name("zeros"));
    return b.g.value(h).dtype == DType::f32 ? z : cast(b, z, b.g.value(h).dtype);
  };
  const ValueId y = attention(b, zeros({B, 1, 1, 1}), zeros({B, 1, T, 1}), reshape(b, h, {B, 1, T, C}),
                              {.mask = mask, .name = "mean_pool"});
  return reshape(b, y, {B, C});
}

ValueId tanh_of(Builder& b, ValueId x) {
  // memfit has no tanh op; softmax over the pair (x, -x) gives
  // (e^x, e^-x) / (e^x + e^-x), whose difference is tanh x: exact, stable
  // for large |x| (softmax subtracts the max), and differentiated by ops
  // that have fast kernels. Used once, on the pooler's [B, hidden].
  const Shape s = b.g.value(x).shape;
  Shape s1 = s;
  s1.push_back(1);
  const int64_t last = static_cast<int64_t>(s.size());
  const ValueId a = reshape(b, x, s1);
  const ValueId p = softmax(b, concat(b, {a, neg(b, a)}, last));
  return reshape(b, add(b, slice(b, p, last, 0, 1), neg(b, slice(b, p, last, 1, 1))), s);
}

ValueId bert_encoder(Builder& b, const BertConfig& c, const BertInputs& in) {
  check(c);
  const Shape ts = b.g.value(in.tokens).shape;
  if (ts.size() != 2) throw GraphError("bert: tokens must be [B, T], got " + shape_str(ts));
  const int64_t B = ts[0], T = ts[1];
  if (T > c.max_position)
    throw GraphError("bert takes sequences of at most " + std::to_string(c.max_position) +
                     " tokens (max_position); the data's are " + std::to_string(T));
  for (ValueId v : {in.attention_mask, in.token_type_ids})
    if (v != kNone && (b.g.value(v).shape != ts || b.g.value(v).dtype != DType::i32))
      throw GraphError("bert: '" + b.g.value(v).name + "' must be i32 " + shape_str(ts) + " as the tokens, got " +
                       dtype_name(b.g.value(v).dtype) + " " + shape_str(b.g.value(v).shape));
  ValueId h = embeddings(b, c, in, T);
  auto es = b.scope("encoder");
  auto ls = b.scope("layer");
  for (int64_t l = 0; l < c.layers; ++l) {
    auto sc = b.scope(std::to_string(l));
    h = layer(b, h, c, in.attention_mask, B, T);
  }
  return h;
}

ValueId bert_pooled(Builder& b, const BertConfig& c, const BertInputs& in) {
  const ValueId h = bert_encoder(b, c, in);
  if (c.pooling == BertPooling::Mean) return mean_pool(b, h, in.attention_mask);
  const Shape& s = b.g.value(h).shape;
  const ValueId first = reshape(b, slice(b, h, 1, 0, 1), {s[0], s[2]});  // the [CLS] token
  auto ps = b.scope("pooler");
  return tanh_of(b, dense(b, first, c.hidden, "dense"));
}

Model bert(const std::string& name, const BertConfig& c) {
  BertConfig known = c;  // vocab_size 0 (the data's) is checked when the data is known
  if (known.vocab_size == 0) known.vocab_size = 1;
  check(known);
  Model m;
  m.name = name;
  m.inputs = {{"tokens", DType::i32, 1, "[T]"},
              {"attention_mask", DType::i32, 1, "[T]", /*optional=*/true},
              {"token_type_ids", DType::i32, 1, "[T]", /*optional=*/true}};
  m.target = {"labels", DType::i32, 0, "[]"};
  m.task = Task::Classification;
  m.max_sequence = c.max_position;
  m.build = [name, c](Builder& b, const Inputs& in, int64_t classes) {
    BertConfig k = c;
    const int64_t data_vocab = in.spec("tokens").range;
    if (k.vocab_size == 0) k.vocab_size = data_vocab;
    if (k.vocab_size < 1)
      throw GraphError("model '" + name + "' takes its vocabulary from the data's tokens, whose range is not known");
    if (data_vocab > k.vocab_size)
      throw GraphError("model '" + name + "' has a vocabulary of " + std::to_string(k.vocab_size) +
                       "; the data's tokens take " + std::to_string(data_vocab) + " values");
    BertInputs bi{in.at("tokens")};
    if (auto it = in.values.find("attention_mask"); it != in.values.end()) bi.attention_mask = it->second;
    if (auto it = in.values.find("token_type_ids"); it != in.values.end()) {
      bi.token_type_ids = it->second;
      if (in.spec("token_type_ids").range > k.type_vocab_size)
        throw GraphError("model '" + name + "' has " + std::to_string(k.type_vocab_size) +
                         " token types; the data's token_type_ids take " +
                         std::to_string(in.spec("token_type_ids").range) + " values");
    }
    ValueId pooled = dropout(b, bert_pooled(b, k, bi), k.hidden_dropout, "dropout");
    return dense(b, pooled, classes, "classifier");
  };
  return m;
}

BertConfig bert_config_from_json(const std::string& path) {
  const fs::path file = fs::is_directory(path) ? fs::path(path) / "config.json" : fs::path(path);
  const std::string f = file.string();
  const nlohmann::json j = read_json(file);
  if (!j.is_object()) throw std::runtime_error(f + ": not a JSON object (a Hugging Face BERT config.json)");
  const std::string type = field<std::string>(j, f, "model_type", std::string("bert"));
  if (type != "bert") throw std::runtime_error(f + ": model_type is '" + type + "', not 'bert'");
  const std::string act = field<std::string>(j, f, "hidden_act", std::string("gelu"));
  if (act != "gelu")
    throw std::runtime_error(f + ": hidden_act '" + act + "' is not supported (memfit's BERT uses GELU, the erf form: 'gelu')");
  const std::string pos = field<std::string>(j, f, "position_embedding_type", std::string("absolute"));
  if (pos != "absolute") throw std::runtime_error(f + ": position_embedding_type '" + pos + "' is not supported ('absolute')");
  BertConfig c;
  c.vocab_size = field<int64_t>(j, f, "vocab_size");
  c.hidden = field<int64_t>(j, f, "hidden_size");
  c.layers = field<int64_t>(j, f, "num_hidden_layers");
  c.heads = field<int64_t>(j, f, "num_attention_heads");
  c.intermediate = field<int64_t>(j, f, "intermediate_size");
  c.max_position = field<int64_t>(j, f, "max_position_embeddings");
  c.type_vocab_size = field<int64_t>(j, f, "type_vocab_size", int64_t{2});
  c.layer_norm_eps = field<double>(j, f, "layer_norm_eps", 1e-12);
  c.hidden_dropout = field<double>(j, f, "hidden_dropout_prob", 0.1);
  c.attention_dropout = field<double>(j, f, "attention_probs_dropout_prob", 0.1);
  // A sentence-transformers folder says how it pools.
  const fs::path pooling = file.parent_path() / "1_Pooling" / "config.json";
  if (fs::is_regular_file(pooling)) {
    const nlohmann::json p = read_json(pooling);
    const std::string pf = pooling.string();
    if (field<bool>(p, pf, "pooling_mode_cls_token", false)) c.pooling = BertPooling::Cls;
    else if (!field<bool>(p, pf, "pooling_mode_mean_tokens", true))
      throw std::runtime_error(pf + ": only mean or [CLS] pooling is supported (pooling_mode_mean_tokens or pooling_mode_cls_token)");
  }
  try {
    check(c);
  } catch (const GraphError& e) {
    throw std::runtime_error(f + ": " + e.what());
  }
  return c;
}

std::optional<Model> find_bert(const std::string& name) {
  if (name == "bert-tiny")
    return bert(name, {.vocab_size = 0, .hidden = 32, .layers = 2, .heads = 2, .intermediate = 64, .max_position = 64,
                       .hidden_dropout = 0.0, .attention_dropout = 0.0});
  if (name == "bert" || name == "minilm") return bert(name, BertConfig{});  // the defaults: all-MiniLM-L6-v2
  if (fs::is_directory(name) && fs::is_regular_file(fs::path(name) / "config.json"))
    return bert(name, bert_config_from_json(name));
  return std::nullopt;
}

std::vector<std::string> bert_names() { return {"bert-tiny", "bert", "minilm"}; }

}  // namespace memfit::models
