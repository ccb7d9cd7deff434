// memfit's tokenizers behind one interface: "char" (a corpus's own alphabet,
// CharTokenizer in data/text.hpp), "gpt2" (GPT-2's byte-level BPE,
// data/bpe.hpp) and "wordpiece" (BERT uncased, data/wordpiece.hpp).
// make_tokenizer builds one from a spec; save() writes a self-contained
// JSON file (the whole vocabulary in it, so that a run directory does not
// depend on where deps/ is) that load_tokenizer reads back.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace memfit::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // "char", "gpt2" or "wordpiece": the "tokenizer" field of the saved file.
  virtual std::string kind() const = 0;
  // Ids are in [0, vocab_size()).
  virtual size_t vocab_size() const = 0;
  // Throws std::runtime_error naming `source` (and the line) for text that
  // is not UTF-8, or, for char, a character outside the alphabet.
  virtual std::vector<int32_t> encode(std::string_view text, const std::string& source) const = 0;
  // Throws std::out_of_range for an id outside the vocabulary. gpt2's ids
  // are byte strings: a cut sequence may decode to a partial UTF-8 character.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  // The self-contained JSON text save() writes (what parse_tokenizer reads
  // back); also what a token cache's key hashes.
  virtual std::string saved() const = 0;
  // saved() written to a temporary file and renamed: a failed write leaves
  // any earlier file as it was. Throws std::runtime_error naming the file.
  void save(const std::string& path) const;

  // The special tokens a classifier or a language model needs; -1 where the
  // tokenizer has none (char has none; gpt2 has only eot, <|endoftext|>;
  // wordpiece has [CLS], [SEP], [PAD] and [UNK]).
  virtual int32_t cls_id() const { return -1; }
  virtual int32_t sep_id() const { return -1; }
  virtual int32_t pad_id() const { return -1; }
  virtual int32_t unk_id() const { return -1; }
  virtual int32_t eot_id() const { return -1; }

 protected:
  Tokenizer() = default;
  Tokenizer(const Tokenizer&) = default;
  Tokenizer& operator=(const Tokenizer&) = default;
};

// The GPT-2 ranks file `gpt2` (without a path) reads unless the caller names
// another: the build's, the project's deps/gpt2/gpt2.tiktoken (CMake's
// MEMFIT_GPT2_RANKS; `make deps-text` installs it there). The command passes
// $MEMFIT_GPT2_RANKS instead when it is set (TrainOptions::gpt2_ranks).
std::string built_in_gpt2_ranks();

// A tokenizer from a spec:
//   char            the alphabet of `corpus` (its parts together), named
//                   `source` in errors;
//   gpt2            GPT-2's BPE from the ranks file `gpt2_ranks`;
//   gpt2:PATH       from PATH, a .tiktoken file (base64 token and rank a
//                   line) or a folder with Hugging Face's vocab.json and
//                   merges.txt;
//   wordpiece:VOCAB BERT uncased WordPiece from VOCAB, a vocab.txt (one
//                   token a line, the line number its id).
// Throws std::invalid_argument for a spec that is none of these, and
// std::runtime_error naming the file for a missing or malformed one.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec, const std::vector<std::string_view>& corpus = {},
                                          const std::string& source = "the text",
                                          const std::string& gpt2_ranks = built_in_gpt2_ranks());

// What save() wrote, whichever kind. Throws std::runtime_error naming the
// file for a missing, unreadable, oversized or malformed one.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);
// The same from saved() text held in memory; `source` names it in errors.
std::unique_ptr<Tokenizer> parse_tokenizer(const std::string& text, const std::string& source);

// A classifier's input: [CLS] ids [SEP], the ids cut so that the whole has
// at most max_len tokens. Throws std::invalid_argument for a tokenizer
// without [CLS] or [SEP], or max_len < 2.
std::vector<int32_t> with_cls_sep(const Tokenizer& t, const std::vector<int32_t>& ids, size_t max_len);

namespace detail {
// Writes `bytes` to path + ".tmp" and renames it to `path`; throws
// std::runtime_error "cannot write the <what> file PATH...".
void write_file_atomic(const std::string& path, const std::string& bytes, const std::string& what);
// The whole file; throws std::runtime_error naming it when it is missing,
// unreadable or larger than max_bytes ("<what> file").
std::string read_file_bounded(const std::string& path, size_t max_bytes, const std::string& what);
}  // namespace detail

}  // namespace memfit::data
