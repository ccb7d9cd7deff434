// BERT's encoder as a memfit model, exactly Hugging Face's BertModel (post-LN):
// embeddings = word + position + token type, LayerNorm, dropout; each layer
// self-attention (query/key/value with bias, scaled dot-product, the
// attention mask as a key-padding mask), attention.output.dense, dropout,
// residual, LayerNorm, then intermediate.dense, GELU (erf), output.dense,
// dropout, residual, LayerNorm. Parameter names and layouts are BertModel's
// state_dict ("encoder.layer.0.attention.self.query.weight", Linear weights
// [out, in]), so a BertModel's safetensors (all-MiniLM-L6-v2's
// model.safetensors) loads as it is.
//
// The classifier reads "tokens" i32 [T] (T <= max_position), optionally
// "attention_mask" i32 [T] (nonzero: a real token; absent: every position
// is one) and "token_type_ids" i32 [T] (absent: all 0), and predicts
// "labels" i32 [] (task Classification). The sequence becomes one vector by
// mean pooling over the attention mask (sentence-transformers' sentence
// embedding) or from the [CLS] token through BertModel's pooler (dense,
// tanh); dropout, then a Linear "classifier", as
// BertForSequenceClassification.
//
// Differences from PyTorch, by design: a sequence whose mask is all 0 gets
// attention output 0 and a pooled vector 0 (BertModel's additive mask gives
// it attention over every key; sentence-transformers' mean is 0 too); the
// word table has no padding_idx (with the attention mask, padded positions
// get no gradient anyway).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "models/model.hpp"

namespace memfit::models {

enum class BertPooling : uint8_t { Mean, Cls };

struct BertConfig {
  int64_t vocab_size = 30522;  // 0: the data's (the tokens' range)
  int64_t hidden = 384, layers = 6, heads = 12, intermediate = 1536;
  int64_t max_position = 512;  // rows of the position table: the longest sequence
  int64_t type_vocab_size = 2;
  double layer_norm_eps = 1e-12;
  double hidden_dropout = 0.1;     // embeddings, residual branches, before the classifier
  double attention_dropout = 0.1;  // attention probabilities
  BertPooling pooling = BertPooling::Mean;
};

// The encoder's inputs: graph values [B, T] (i32); mask and types may be kNone.
struct BertInputs {
  ValueId tokens = kNone, attention_mask = kNone, token_type_ids = kNone;
};

// The last layer's hidden states [B, T, hidden]. c.vocab_size must be set
// (> 0). Throws GraphError for a bad config or T > max_position.
ValueId bert_encoder(Builder& b, const BertConfig& c, const BertInputs& in);
// One vector per sequence [B, hidden]: the mask-weighted mean of the hidden
// states (Mean) or pooler.dense + tanh of position 0 (Cls).
ValueId bert_pooled(Builder& b, const BertConfig& c, const BertInputs& in);

// Pieces the pooling is made of (exposed for their gradient checks):
// mean_pool: h [B, T, C] averaged over the positions where mask [B, T] (i32,
// kNone: none) is nonzero, 0 where there is none; tanh_of: tanh, element-wise.
ValueId mean_pool(Builder& b, ValueId h, ValueId mask);
ValueId tanh_of(Builder& b, ValueId x);

Model bert(const std::string& name, const BertConfig& c);

// A Hugging Face BertModel config.json (the file, or a folder holding it;
// a sentence-transformers folder's 1_Pooling/config.json, if there, picks
// the pooling, else mean). Throws std::runtime_error naming the file and
// the field for a missing file, a non-BERT model or an activation other
// than "gelu".
BertConfig bert_config_from_json(const std::string& path);

// The presets: bert-tiny (2 layers, hidden 32, 2 heads, intermediate 64, 64
// positions, the data's vocabulary: tests) and bert / minilm
// (all-MiniLM-L6-v2: 6 x 384, 12 heads, intermediate 1536, 512 positions,
// vocabulary 30522, eps 1e-12, mean pooling); or a folder holding a BERT
// config.json (bert_config_from_json). nullopt otherwise.
std::optional<Model> find_bert(const std::string& name);
std::vector<std::string> bert_names();

}  // namespace memfit::models
