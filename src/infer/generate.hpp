// Sampling text from a trained language model (memfit generate): the run
// directory's weights and tokenizer, a forward-only plan of one sequence of
// the model's window, printed before the first token, and one forward pass
// per new token over the last block_size tokens (causal attention: the
// logits at the last real position see only the tokens before it).
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>

#include "fit/report.hpp"

namespace memfit::train {

struct GenerateOptions {
  std::string run;           // a run directory of a language model (memfit train --out)
  std::string prompt;        // "" : start from a newline (or the first id)
  int64_t tokens = 200;      // tokens to sample
  double temperature = 1.0;  // > 0; logits are divided by it
  int64_t top_k = 0;         // > 0: sample among the k most likely only
  uint64_t seed = 42;
  int64_t threads = 0;       // 0: all cores
};

struct GenerateResult {
  std::string text;          // the sampled continuation (not the prompt)
  int64_t tokens = 0;
  double seconds = 0.0;      // sampling only, after the plan
  MemoryReport report;
};

// Throws std::invalid_argument for bad options and std::runtime_error for a
// run directory without a language model's weights and tokenizer, or a
// prompt the tokenizer cannot read. on_text receives each token's text as
// it is sampled (may be empty for a partial UTF-8 character).
GenerateResult generate(const GenerateOptions& o, std::ostream& log,
                        const std::function<void(const std::string&)>& on_text = {});

}  // namespace memfit::train
