// Labelled texts for classification, and the Dataset of their token ids.
//
// Sources (read_labelled):
//   FILE.jsonl  one JSON object a line: {"text": "...", "label": "sports"}
//               (a label may be a string or an integer; blank lines skipped)
//   FILE.csv    a header row naming a "text" and a "label" column (any
//               order, other columns ignored), RFC 4180 quoting ("" inside
//               quotes, newlines inside quoted fields); or, with CsvColumns
//               (--csv-columns label,text,text), no header: every row is an
//               example whose columns have those roles (AG News, DBpedia,
//               Yelp as torchtext downloads them)
//   DIR         a folder per class, each file in it one example
//               (DIR/sports/0001.txt ...)
// Every bad row is an error naming the file and line: not JSON, no text or
// label, a label of another type, an empty text, a CSV row with a missing
// field or an unterminated quote, text that is not UTF-8.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.hpp"

namespace memfit::data {

struct LabelledTexts {
  std::vector<std::string> texts;
  std::vector<std::string> labels;  // as written (an integer label as its digits)
  std::string source;               // the file or folder read
  size_t size() const { return texts.size(); }
};

// The columns of a CSV file without a header, in order: each "label" (one),
// "text" (one or more: joined with a space, as torchtext joins AG News's
// title and description) or "-" (ignored). Empty: the file has a header.
struct CsvColumns {
  enum Role : uint8_t { Label, Text, Skip };
  std::vector<Role> roles;
  bool empty() const { return roles.empty(); }
};
// Parses "label,text,text" (names case-insensitive, "-" or "skip" for an
// ignored column); throws std::invalid_argument naming the flag, the text
// and the accepted form. "" gives the empty CsvColumns.
CsvColumns parse_csv_columns(const std::string& spec);

// Throws std::runtime_error naming the file and line of a bad row, or the
// path when there is nothing to read. `columns` (when not empty) reads CSV
// files without a header; it is an error for another kind of source.
LabelledTexts read_labelled(const std::string& path, const CsvColumns& columns = {});

// The classes of one or more label lists: their distinct labels, sorted
// (numerically when every label is an integer, so "2" < "10").
std::vector<std::string> class_names_of(const std::vector<const LabelledTexts*>& sets);

// Examples split into training and held-out parts on a seeded draw per
// example (as split_entries does for documents); both keep their order.
// Throws std::invalid_argument for a fraction outside [0, 1).
struct LabelledSplit {
  LabelledTexts train, held_out;
};
LabelledSplit split_labelled(LabelledTexts all, double fraction, uint64_t seed);

// Tokenized examples as fixed-length samples: "tokens" i32 [T] (the ids,
// truncated to T and padded with pad_id), "attention_mask" i32 [T] (1 for a
// real token, 0 for padding), "lengths" i32 [] (the real tokens, 1..T) and
// "labels" i32 [] (the class index). Models read the ones they declare.
class TokenizedTexts final : public Dataset {
 public:
  // ids[i]: example i's token ids (truncated here to max_len; an empty
  // one is refused, naming the example); labels[i] in [0, classes).
  TokenizedTexts(const std::vector<std::vector<int32_t>>& ids, std::vector<int32_t> labels, int64_t max_len,
                 int64_t vocab, std::vector<std::string> class_names, int32_t pad_id);

  size_t size() const override { return labels_.size(); }
  int num_classes() const override { return static_cast<int>(names_.size()); }
  std::vector<TensorSpec> tensors() const override;
  void get_tensors(size_t i, void* const* out) const override;
  std::vector<std::string> class_names() const override { return names_; }
  size_t resident_bytes() const override;
  int64_t max_len() const { return max_len_; }
  // Examples longer than max_len before truncation.
  size_t truncated() const { return truncated_; }

 private:
  std::vector<int32_t> tokens_;     // every example's (truncated) ids, one after another
  std::vector<uint64_t> offsets_;   // example i: tokens_[offsets_[i], offsets_[i + 1])
  std::vector<int32_t> labels_;
  int64_t max_len_, vocab_;
  std::vector<std::string> names_;
  int32_t pad_;
  size_t truncated_ = 0;
};

}  // namespace memfit::data
