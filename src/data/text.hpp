// memfit text data for language modelling: UTF-8 decoding with errors that
// say where, the char-level tokenizer (the corpus's own alphabet), fortune
// files split into entries and entries into a seeded held-out split, and
// TokenWindows, the Dataset of next-token windows over a token sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/dataset.hpp"
#include "data/tokenizer.hpp"

namespace memfit::data {

// Code points of UTF-8 text. Throws std::runtime_error naming `source`, the
// line and the byte offset of the first invalid sequence (a stray
// continuation byte, a truncated or overlong sequence, a surrogate, a value
// past U+10FFFF).
std::vector<char32_t> decode_utf8(std::string_view text, const std::string& source);
std::string encode_utf8(const std::u32string& cps);
// Throws as decode_utf8 does, without decoding into memory.
void check_utf8(std::string_view text, const std::string& source);

// One id per distinct code point of the corpus, in code-point order (ids
// 0..V-1). Saved with a run (JSON: {"tokenizer": "char", "alphabet": [code
// points]}) so that resume and generation use the same ids. A Tokenizer
// (data/tokenizer.hpp) of kind "char", without special tokens.
class CharTokenizer final : public Tokenizer {
 public:
  static CharTokenizer from_text(std::string_view text, const std::string& source);
  // The alphabet of several texts together (a corpus's training and
  // held-out parts), without joining them.
  static CharTokenizer from_texts(const std::vector<std::string_view>& parts, const std::string& source);
  // Throws std::runtime_error naming the file for a missing, unreadable or
  // malformed one.
  static CharTokenizer load(const std::string& path);
  // A file save() wrote, parsed (load and load_tokenizer's part).
  static CharTokenizer from_saved(const nlohmann::json& j, const std::string& path);
  // {"tokenizer": "char", "alphabet": [...]}, what save() writes.
  std::string saved() const override;

  std::string kind() const override { return "char"; }
  size_t vocab_size() const override { return alphabet_.size(); }
  const std::u32string& alphabet() const { return alphabet_; }
  // Throws std::runtime_error naming `source`, the line and the character
  // for one outside the alphabet.
  std::vector<int32_t> encode(std::string_view text, const std::string& source) const override;
  // Throws std::out_of_range for an id outside [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids) const override;

 private:
  explicit CharTokenizer(std::u32string alphabet);
  std::u32string alphabet_;  // sorted, distinct
};

// The entries of a fortune file: text between lines holding only "%"
// (trailing newlines trimmed, empty entries dropped).
std::vector<std::string> split_fortunes(std::string_view text);

// The bytes of a file; throws std::runtime_error naming it when it cannot
// be read.
std::string read_text_file(const std::string& path);

// The paragraphs of a text: runs of lines separated by blank lines
// (whitespace-only lines count as blank; trailing newlines trimmed).
std::vector<std::string> split_paragraphs(std::string_view text);

// The documents of a language-modelling corpus at `path`: a file, or every
// regular file directly in a directory (sorted by name; subfolders are not
// read). In a directory, files holding a NUL byte (binary indexes such as
// fortune's .dat files) and links to a file already read are skipped and
// counted. A file with lines holding only "%" is a fortune file: its
// documents are its entries; any other file's are its paragraphs. Throws
// std::runtime_error naming the file for an unreadable file, text that is
// not UTF-8 (with its line), a binary file given by name, or no text.
struct Corpus {
  std::vector<std::string> documents;
  std::vector<std::string> files;  // read, in order
  size_t skipped = 0;              // binary files and duplicate links
  size_t bytes = 0;                // text read
};
Corpus read_corpus(const std::string& path);

// A held-out split on document boundaries: each entry goes to the held-out
// part with probability `fraction`, by a draw that depends only on (seed,
// its index), so the split is the same on every run with the seed. Both
// parts keep the entries' order. Throws std::invalid_argument for a
// fraction outside [0, 1).
struct EntrySplit {
  std::vector<std::string> train, held_out;
};
EntrySplit split_entries(std::vector<std::string> entries, double fraction, uint64_t seed);

// Entries joined into one text, each followed by a blank line: the
// separator a language model learns as the end of an entry.
std::string join_entries(const std::vector<std::string>& entries);

// Next-token windows over a token sequence of N ids in [0, vocab): sample i
// is tokens [s, s + T) as "tokens" and [s + 1, s + T + 1) as "targets" (i32
// [T] each; targets pad a partial batch with -1). There are (N - 1) / T
// samples an epoch, so an epoch reads about every token once. Fixed
// windows (no seed): s = i T, every token a target at most once per epoch,
// the loader's seeded shuffle ordering them (evaluation). Random windows
// (a seed): s is drawn uniformly from [0, N - T - 1] for each (epoch, i),
// so every epoch sees fresh windows at every offset, a pure function of
// (seed, epoch, i) that resume reproduces. Throws std::invalid_argument
// when the sequence holds no window (N <= T), or an id lies outside
// [0, vocab).
class TokenWindows final : public Dataset {
 public:
  TokenWindows(std::shared_ptr<const std::vector<int32_t>> tokens, int64_t block, int64_t vocab,
               std::optional<uint64_t> random_seed = std::nullopt);

  size_t size() const override { return windows_; }
  int num_classes() const override { return static_cast<int>(vocab_); }
  std::vector<TensorSpec> tensors() const override;
  // The window of epoch 0.
  void get_tensors(size_t i, void* const* out) const override { get_tensors_at(i, 0, out); }
  void get_tensors_at(size_t i, uint64_t epoch, void* const* out) const override;
  size_t resident_bytes() const override { return tokens_->capacity() * sizeof(int32_t); }
  int64_t block() const { return block_; }
  // The first token of sample i in epoch `epoch`.
  size_t start_of(size_t i, uint64_t epoch) const;

 private:
  std::shared_ptr<const std::vector<int32_t>> tokens_;
  int64_t block_, vocab_;
  size_t windows_;
  std::optional<uint64_t> seed_;
};

}  // namespace memfit::data
