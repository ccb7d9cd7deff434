// BERT uncased WordPiece, as Hugging Face's tokenizers runs it
// (BertWordPieceTokenizer with lowercase and accent stripping):
//   1. clean: drop NUL, U+FFFD and control characters (Cc, Cf, Co other
//      than tab, newline and carriage return); every whitespace character
//      becomes a space;
//   2. put spaces around CJK ideographs, so that each is a word;
//   3. strip accents: NFD, then drop non-spacing marks (Mn);
//   4. lower-case (each character's Unicode lower case);
//   5. split on whitespace (dropped) and punctuation (ASCII symbols and
//      Unicode P*, each its own word);
//   6. each word: [UNK] if it has more than 100 characters; otherwise the
//      longest vocabulary token that starts it, then the longest
//      "##"-token that continues it, and so on; [UNK] for the whole word if
//      some part matches no token.
// Unicode properties and NFD come from libutf8proc. encode() returns the
// word pieces only: with_cls_sep (data/tokenizer.hpp) adds [CLS] and [SEP].
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.hpp"

namespace memfit::data {

class WordPieceTokenizer final : public Tokenizer {
 public:
  static constexpr size_t kMaxWordChars = 100;

  // A vocab.txt: one token a line, the line number (from 0) its id;
  // trailing whitespace is not part of a token, and a token given twice
  // keeps its last line (as tokenizers reads it). Throws std::runtime_error
  // naming the file for a missing or malformed one (no [UNK]).
  static WordPieceTokenizer from_vocab_file(const std::string& path);
  // The tokens in id order; `where` names them in errors.
  static WordPieceTokenizer from_tokens(std::vector<std::string> tokens, const std::string& where);
  // A file save() wrote, parsed (load_tokenizer's part).
  static WordPieceTokenizer from_saved(const nlohmann::json& j, const std::string& path);

  std::string kind() const override { return "wordpiece"; }
  size_t vocab_size() const override;
  std::vector<int32_t> encode(std::string_view text, const std::string& source) const override;
  // The tokens joined by spaces, a "##" piece joined to the one before it
  // (lower-case and without accents: WordPiece does not keep the text).
  std::string decode(const std::vector<int32_t>& ids) const override;
  std::string saved() const override;
  int32_t cls_id() const override;
  int32_t sep_id() const override;
  int32_t pad_id() const override;
  int32_t unk_id() const override;

  // -1 for none; id_to_token throws std::out_of_range.
  int32_t token_to_id(std::string_view token) const;
  const std::string& id_to_token(int32_t id) const;

  // Steps 1-4 above: the text a word split sees (for tests).
  std::string normalize(std::string_view text, const std::string& source) const;

  struct Impl;

 private:
  explicit WordPieceTokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;  // immutable; copies share it
};

}  // namespace memfit::data
