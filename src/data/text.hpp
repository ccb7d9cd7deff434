// memfit text data for language modelling: UTF-8 decoding with errors that
// say where, the char-level tokenizer (the corpus's own alphabet), fortune
// files split into entries and entries into a seeded held-out split, and
// TokenWindows, the Dataset of next-token windows over a token sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/dataset.hpp"

namespace memfit::data {

// Code points of UTF-8 text. Throws std::runtime_error naming `source`, the
// line and the byte offset of the first invalid sequence (a stray
// continuation byte, a truncated or overlong sequence, a surrogate, a value
// past U+10FFFF).
std::vector<char32_t> decode_utf8(std::string_view text, const std::string& source);
std::string encode_utf8(const std::u32string& cps);

// One id per distinct code point of the corpus, in code-point order (ids
// 0..V-1). Saved with a run (JSON: {"tokenizer": "char", "alphabet": [code
// points]}) so that resume and generation use the same ids.
class CharTokenizer {
 public:
  static CharTokenizer from_text(std::string_view text, const std::string& source);
  // Throws std::runtime_error naming the file for a missing, unreadable or
  // malformed one.
  static CharTokenizer load(const std::string& path);
  // Written to a temporary file and renamed: a failed write leaves any
  // earlier file as it was.
  void save(const std::string& path) const;

  size_t vocab_size() const { return alphabet_.size(); }
  const std::u32string& alphabet() const { return alphabet_; }
  // Throws std::runtime_error naming `source`, the line and the character
  // for one outside the alphabet.
  std::vector<int32_t> encode(std::string_view text, const std::string& source) const;
  // Throws std::out_of_range for an id outside [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids) const;

 private:
  explicit CharTokenizer(std::u32string alphabet);
  std::u32string alphabet_;  // sorted, distinct
};

// The entries of a fortune file: text between lines holding only "%"
// (trailing newlines trimmed, empty entries dropped).
std::vector<std::string> split_fortunes(std::string_view text);

// A held-out split on document boundaries: each entry goes to the held-out
// part with probability `fraction`, by a draw that depends only on (seed,
// its index), so the split is the same on every run with the seed. Both
// parts keep the entries' order. Throws std::invalid_argument for a
// fraction outside [0, 1).
struct EntrySplit {
  std::vector<std::string> train, held_out;
};
EntrySplit split_entries(const std::vector<std::string>& entries, double fraction, uint64_t seed);

// Entries joined into one text, each followed by a blank line: the
// separator a language model learns as the end of an entry.
std::string join_entries(const std::vector<std::string>& entries);

// Next-token windows over a token sequence of N ids in [0, vocab): sample i
// is tokens [i T, i T + T) as "tokens" and [i T + 1, i T + T + 1) as
// "targets" (i32 [T] each; targets pad a partial batch with -1). There are
// (N - 1) / T samples: every token is a target at most once per epoch, and
// the loader's seeded shuffle orders the windows. Throws
// std::invalid_argument when the sequence holds no window (N <= T), or an
// id lies outside [0, vocab).
class TokenWindows final : public Dataset {
 public:
  TokenWindows(std::shared_ptr<const std::vector<int32_t>> tokens, int64_t block, int64_t vocab);

  size_t size() const override { return windows_; }
  int num_classes() const override { return static_cast<int>(vocab_); }
  std::vector<TensorSpec> tensors() const override;
  void get_tensors(size_t i, void* const* out) const override;
  size_t resident_bytes() const override { return tokens_->capacity() * sizeof(int32_t); }
  int64_t block() const { return block_; }

 private:
  std::shared_ptr<const std::vector<int32_t>> tokens_;
  int64_t block_, vocab_;
  size_t windows_;
};

}  // namespace memfit::data
