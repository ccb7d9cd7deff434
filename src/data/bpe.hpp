// GPT-2's byte-level BPE, as tiktoken runs it: the text is split into
// pre-tokens by GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (libpcre2, UTF + UCP, JIT where available; \s is Unicode's White_Space,
// as in Rust's regex, which tiktoken uses), and each pre-token's bytes are
// merged pair by pair, the pair whose concatenation has the lowest rank
// first, until no adjacent pair is a token. A token's id is its rank;
// <|endoftext|> follows the ranks (50256 for GPT-2's 50,256).
//
// encode() treats "<|endoftext|>" in the text as ordinary text (tiktoken's
// encode_ordinary): a caller inserts eot_id() between documents itself.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.hpp"

namespace memfit::data {

// GPT-2's pre-tokenizer pattern as written above (what a saved file records).
extern const char* const kGpt2Pattern;

class Gpt2Tokenizer final : public Tokenizer {
 public:
  // A .tiktoken ranks file, or a folder with vocab.json and merges.txt
  // (Hugging Face's GPT-2 files: vocab.json's ids are the ranks, and
  // merges.txt must list the merges in rank order). Throws
  // std::runtime_error naming the file for a missing or malformed one (a
  // bad line, a duplicate token or rank, a byte without a token).
  static Gpt2Tokenizer from_file(const std::string& path);
  // A file save() wrote, parsed (load_tokenizer's part); `path` names it in errors.
  static Gpt2Tokenizer from_saved(const nlohmann::json& j, const std::string& path);

  std::string kind() const override { return "gpt2"; }
  size_t vocab_size() const override;
  std::vector<int32_t> encode(std::string_view text, const std::string& source) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  std::string saved() const override;
  int32_t eot_id() const override;

  // The bytes of token `id` (throws std::out_of_range), and the id of a
  // byte string (-1 for none): the ranks, for tests and tools.
  std::string_view token_bytes(int32_t id) const;
  int32_t rank_of(std::string_view bytes) const;
  // The ranks 0..n-1 (gaps allowed) before the special token.
  size_t num_ranks() const;

  struct Impl;

 private:
  explicit Gpt2Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;  // immutable; copies share it
};

// GPT-2's printable stand-in of a byte (bytes_to_unicode() of its encoder:
// the 188 printable Latin-1 bytes map to themselves, the others to
// U+0100...), the alphabet vocab.json and merges.txt write tokens in.
char32_t gpt2_byte_to_unicode(unsigned char b);

}  // namespace memfit::data
