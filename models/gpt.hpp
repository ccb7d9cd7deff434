// GPT-2's architecture as a memfit model: learned token and position
// embeddings, pre-LN blocks of causal self-attention (the fused attention
// op) and a GELU (tanh) MLP, a final layer norm, and the head tied to the
// token table. Parameter names and layouts are Hugging Face's GPT-2
// ("transformer.h.0.attn.c_attn.weight" [in, out], as its Conv1D stores
// them), so GPT-2-format safetensors load as they are.
//
// Reads "tokens" i32 [T] (T <= block_size), predicts "targets" i32 [T]
// (task LanguageModel). The vocabulary is the data's (the tokens' range)
// unless the config fixes it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "models/model.hpp"

namespace memfit::models {

struct GptConfig {
  int64_t n_layer = 6, n_head = 6, n_embd = 384;
  int64_t block_size = 256;  // rows of the position table: the longest sequence
  int64_t vocab_size = 0;    // 0: the data's
  double dropout = 0.0;      // embeddings, attention probabilities, residual branches
  bool bias = true;          // linear layers and layer norms
};

Model gpt(const std::string& name, const GptConfig& c);

// The presets: gpt-tiny (2 layers, 2 heads, 32 wide, T <= 64: tests),
// gpt-char (6 x 6 x 384, T <= 256, dropout 0.2: the standard small
// char-level run, ~10.7M parameters with a 65-character vocabulary) and
// gpt2 (12 x 12 x 768, T <= 1024, vocabulary 50257: 124M). nullopt for
// another name. `dropout`, where given, replaces the preset's probability
// (embeddings, attention, residual branches; 0: none), as --dropout P.
std::optional<Model> find_gpt(const std::string& name, std::optional<double> dropout = std::nullopt);
std::vector<std::string> gpt_names();

}  // namespace memfit::models
