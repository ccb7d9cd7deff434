// Text through the tokenizers' Unicode paths (GPT-2's PCRE2 pre-tokenizer
// and byte-level merges; WordPiece's cleaning, NFD, case and splits), with
// small vocabularies built here: invalid UTF-8 must be refused with
// std::runtime_error, and valid text must encode to ids in the vocabulary;
// GPT-2's must decode back to the very bytes.
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "data/bpe.hpp"
#include "data/wordpiece.hpp"
#include "fuzz/harness.hpp"

namespace {

std::string b64(const std::string& s) {
  static const char k[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string o;
  for (size_t i = 0; i < s.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(s[i])) << 16;
    if (i + 1 < s.size()) v |= uint32_t(uint8_t(s[i + 1])) << 8;
    if (i + 2 < s.size()) v |= uint8_t(s[i + 2]);
    o += k[v >> 18 & 63];
    o += k[v >> 12 & 63];
    o += i + 1 < s.size() ? k[v >> 6 & 63] : '=';
    o += i + 2 < s.size() ? k[v & 63] : '=';
  }
  return o;
}

const memfit::data::Gpt2Tokenizer& gpt2() {
  static const memfit::data::Gpt2Tokenizer t = [] {
    nlohmann::json ranks = nlohmann::json::array();
    for (int b = 0; b < 256; ++b) ranks.push_back(b64(std::string(1, char(b))));
    for (const char* m : {"th", "he", "the", " t", " the", "in", "ing", "  ", "\n\n", "\xC3\xA9", "'s", "12", "123"})
      ranks.push_back(b64(m));
    const nlohmann::json j = {{"tokenizer", "gpt2"},
                              {"version", 1},
                              {"pattern", memfit::data::kGpt2Pattern},
                              {"special", {{"<|endoftext|>", ranks.size()}}},
                              {"ranks", ranks}};
    return memfit::data::Gpt2Tokenizer::from_saved(j, "fuzz");
  }();
  return t;
}

const memfit::data::WordPieceTokenizer& wordpiece() {
  static const memfit::data::WordPieceTokenizer t = memfit::data::WordPieceTokenizer::from_tokens(
      {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "b", "e", "##a", "##b", "##e", "he", "hello", "##llo", ",", "!", "\xE4\xB8\xAD",
       "cafe", "##s", "1", "##2"},
      "fuzz");
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  return memfit::fuzz::run_one([&] {
    const std::vector<int32_t> g = gpt2().encode(text, "fuzz");  // invalid UTF-8: runtime_error
    for (int32_t id : g)
      if (id < 0 || static_cast<size_t>(id) >= gpt2().vocab_size()) std::abort();
    if (gpt2().decode(g) != text) std::abort();
    const std::vector<int32_t> w = wordpiece().encode(text, "fuzz");
    for (int32_t id : w)
      if (id < 0 || static_cast<size_t>(id) >= wordpiece().vocab_size()) std::abort();
    wordpiece().decode(w);
  });
}
