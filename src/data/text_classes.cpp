#include "data/text_classes.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "data/draw.hpp"
#include "data/text.hpp"

namespace fs = std::filesystem;

namespace memfit::data {
namespace {

const uint64_t kLabelledSplitStream = rng::name_hash("data.labelled_split");

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

void add(LabelledTexts& out, std::string text, std::string label, const std::string& where) {
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) throw std::runtime_error(where + ": the text is empty");
  if (label.empty()) throw std::runtime_error(where + ": the label is empty");
  check_utf8(text, where);
  out.texts.push_back(std::move(text));
  out.labels.push_back(std::move(label));
}

void read_jsonl(const std::string& path, LabelledTexts& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(n);
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object())
      throw std::runtime_error(where + ": not a JSON object (expected {\"text\": \"...\", \"label\": ...})");
    if (!j.contains("text") || !j["text"].is_string()) throw std::runtime_error(where + ": no \"text\" string");
    if (!j.contains("label")) throw std::runtime_error(where + ": no \"label\"");
    const nlohmann::json& l = j["label"];
    std::string label;
    if (l.is_string()) label = l.get<std::string>();
    else if (l.is_number_integer()) label = std::to_string(l.get<int64_t>());
    else throw std::runtime_error(where + ": the label must be a string or an integer, got " + l.dump());
    add(out, j["text"].get<std::string>(), std::move(label), where);
  }
}

// RFC 4180 rows; `line` is the 1-based line each row starts on.
struct CsvRow {
  std::vector<std::string> fields;
  size_t line = 0;
};

std::vector<CsvRow> parse_csv(const std::string& text, const std::string& path) {
  std::vector<CsvRow> rows;
  CsvRow row;
  std::string field;
  size_t line = 1, start = 1;
  bool quoted = false, any = false;
  auto end_field = [&] {
    row.fields.push_back(std::move(field));
    field.clear();
  };
  auto end_row = [&] {
    end_field();
    row.line = start;
    if (!(row.fields.size() == 1 && row.fields[0].empty())) rows.push_back(std::move(row));  // a blank line
    row = CsvRow{};
    any = false;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < text.size() && text[i + 1] == '"') {
          field += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        if (c == '\n') ++line;
        field += c;
      }
      continue;
    }
    if (!any) start = line;
    any = true;
    if (c == '"' && field.empty()) quoted = true;
    else if (c == ',') end_field();
    else if (c == '\n') {
      if (!field.empty() && field.back() == '\r') field.pop_back();
      end_row();
      ++line;
    } else field += c;
  }
  if (quoted) throw std::runtime_error(path + ":" + std::to_string(start) + ": a quoted field is not closed");
  if (any) end_row();
  return rows;
}

void read_csv(const std::string& path, LabelledTexts& out) {
  const std::vector<CsvRow> rows = parse_csv(read_text_file(path), path);
  if (rows.empty()) throw std::runtime_error(path + ": no header row");
  size_t ti = SIZE_MAX, li = SIZE_MAX;
  for (size_t k = 0; k < rows[0].fields.size(); ++k) {
    const std::string h = lower(rows[0].fields[k]);
    if (h == "text") ti = k;
    if (h == "label") li = k;
  }
  if (ti == SIZE_MAX || li == SIZE_MAX)
    throw std::runtime_error(path + ":1: the header must name a \"text\" and a \"label\" column");
  for (size_t r = 1; r < rows.size(); ++r) {
    const CsvRow& row = rows[r];
    const std::string where = path + ":" + std::to_string(row.line);
    if (row.fields.size() != rows[0].fields.size())
      throw std::runtime_error(where + ": " + std::to_string(row.fields.size()) + " fields, the header has " +
                               std::to_string(rows[0].fields.size()));
    add(out, row.fields[ti], row.fields[li], where);
  }
}

// A CSV without a header: every row an example, its columns' roles given.
void read_csv_columns(const std::string& path, const CsvColumns& columns, LabelledTexts& out) {
  const std::vector<CsvRow> rows = parse_csv(read_text_file(path), path);
  for (const CsvRow& row : rows) {
    const std::string where = path + ":" + std::to_string(row.line);
    if (row.fields.size() != columns.roles.size())
      throw std::runtime_error(where + ": " + std::to_string(row.fields.size()) + " fields, --csv-columns names " +
                               std::to_string(columns.roles.size()));
    std::string text, label;
    for (size_t k = 0; k < row.fields.size(); ++k) {
      if (columns.roles[k] == CsvColumns::Label) {
        label = row.fields[k];
      } else if (columns.roles[k] == CsvColumns::Text) {
        if (!text.empty() && !row.fields[k].empty()) text += ' ';
        text += row.fields[k];
      }
    }
    if (&row == &rows.front() && lower(label) == "label")
      throw std::runtime_error(where + ": the first row looks like a header (its label is \"" + label +
                               "\"); --csv-columns is for CSV files without one: leave it out to read the header");
    add(out, std::move(text), std::move(label), where);
  }
}

void read_folders(const std::string& dir, LabelledTexts& out) {
  std::vector<fs::path> classes;
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().front() != '.') classes.push_back(e.path());
  std::sort(classes.begin(), classes.end());
  for (const fs::path& c : classes) {
    std::vector<fs::path> files;
    for (const fs::directory_entry& e : fs::directory_iterator(c))
      if (e.is_regular_file() && e.path().filename().string().front() != '.') files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) add(out, read_text_file(f.string()), c.filename().string(), f.string());
  }
}

bool is_integer(const std::string& s) {
  size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size() || s.size() - i > 18) return false;
  return std::all_of(s.begin() + static_cast<ptrdiff_t>(i), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

CsvColumns parse_csv_columns(const std::string& spec) {
  CsvColumns c;
  if (spec.empty()) return c;
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument("--csv-columns '" + spec + "': " + why +
                                 " (expected the roles of a header-less CSV's columns in order, each label, text or "
                                 "-, with one label and at least one text: e.g. label,text,text for AG News)");
  };
  size_t start = 0;
  for (;;) {
    const size_t end = std::min(spec.find(',', start), spec.size());
    const std::string r = lower(spec.substr(start, end - start));
    if (r == "label") c.roles.push_back(CsvColumns::Label);
    else if (r == "text") c.roles.push_back(CsvColumns::Text);
    else if (r == "-" || r == "skip") c.roles.push_back(CsvColumns::Skip);
    else throw bad("'" + r + "' is not a column role");
    if (c.roles.size() > 1024) throw bad("more than 1024 columns");
    if (end == spec.size()) break;
    start = end + 1;
  }
  if (std::count(c.roles.begin(), c.roles.end(), CsvColumns::Label) != 1) throw bad("it needs exactly one label");
  if (std::count(c.roles.begin(), c.roles.end(), CsvColumns::Text) < 1) throw bad("it needs a text column");
  return c;
}

LabelledTexts read_labelled(const std::string& path, const CsvColumns& columns) {
  LabelledTexts out;
  out.source = path;
  std::error_code ec;
  const std::string ext = lower(fs::path(path).extension().string());
  if (!columns.empty() && !(ext == ".csv" && fs::is_regular_file(path, ec)))
    throw std::runtime_error(path + ": --csv-columns describes CSV files without a header; this is not a .csv file "
                                    "(leave the flag out for JSONL or a folder per class)");
  if (fs::is_directory(path, ec)) {
    read_folders(path, out);
  } else if (fs::is_regular_file(path, ec)) {
    if (ext == ".csv" && !columns.empty()) read_csv_columns(path, columns, out);
    else if (ext == ".csv") read_csv(path, out);
    else if (ext == ".jsonl" || ext == ".json" || ext == ".ndjson") read_jsonl(path, out);
    else throw std::runtime_error(path + ": labelled text must be .jsonl or .csv (or a folder per class)");
  } else {
    throw std::runtime_error("no labelled text at " + path + ": no such file or directory");
  }
  if (out.texts.empty())
    throw std::runtime_error("no examples in " + path +
                             (fs::is_directory(path, ec) ? " (expected a folder per class of text files)" : ""));
  return out;
}

std::vector<std::string> class_names_of(const std::vector<const LabelledTexts*>& sets) {
  std::set<std::string> seen;
  for (const LabelledTexts* s : sets)
    if (s) seen.insert(s->labels.begin(), s->labels.end());
  std::vector<std::string> names(seen.begin(), seen.end());
  if (std::all_of(names.begin(), names.end(), is_integer))
    std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) { return std::stoll(a) < std::stoll(b); });
  return names;
}

LabelledSplit split_labelled(LabelledTexts all, double fraction, uint64_t seed) {
  if (!(fraction >= 0.0 && fraction < 1.0))
    throw std::invalid_argument("the held-out fraction must be in [0, 1), got " + std::to_string(fraction));
  LabelledSplit s;
  s.train.source = s.held_out.source = all.source;
  const uint64_t key = rng::stream_key(seed, kLabelledSplitStream, 0);
  for (size_t i = 0; i < all.size(); ++i) {
    LabelledTexts& to = static_cast<double>(detail::draw48(key, i)) < fraction * 281474976710656.0 ? s.held_out : s.train;
    to.texts.push_back(std::move(all.texts[i]));
    to.labels.push_back(std::move(all.labels[i]));
  }
  return s;
}

TokenizedTexts::TokenizedTexts(const std::vector<std::vector<int32_t>>& ids, std::vector<int32_t> labels, int64_t max_len,
                               int64_t vocab, std::vector<std::string> class_names, int32_t pad_id)
    : labels_(std::move(labels)), max_len_(max_len), vocab_(vocab), names_(std::move(class_names)), pad_(pad_id) {
  if (ids.size() != labels_.size()) throw std::invalid_argument("TokenizedTexts: one label per example");
  if (max_len_ < 1) throw std::invalid_argument("--max-len must be at least 1");
  if (names_.empty()) throw std::invalid_argument("TokenizedTexts: no classes");
  offsets_.reserve(ids.size() + 1);
  offsets_.push_back(0);
  size_t total = 0;
  for (const auto& v : ids) total += std::min<size_t>(v.size(), static_cast<size_t>(max_len_));
  tokens_.reserve(total);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i].empty()) throw std::invalid_argument("example " + std::to_string(i) + " has no tokens");
    if (labels_[i] < 0 || static_cast<size_t>(labels_[i]) >= names_.size())
      throw std::invalid_argument("example " + std::to_string(i) + " has class " + std::to_string(labels_[i]) +
                                  " of " + std::to_string(names_.size()));
    const size_t n = std::min<size_t>(ids[i].size(), static_cast<size_t>(max_len_));
    truncated_ += ids[i].size() > n;
    for (size_t k = 0; k < n; ++k) {
      const int32_t t = ids[i][k];
      if (t < 0 || t >= vocab_)
        throw std::invalid_argument("example " + std::to_string(i) + " has token id " + std::to_string(t) +
                                    ", outside the vocabulary of " + std::to_string(vocab_));
      tokens_.push_back(t);
    }
    offsets_.push_back(tokens_.size());
  }
}

std::vector<TensorSpec> TokenizedTexts::tensors() const {
  const int64_t classes = static_cast<int64_t>(names_.size());
  return {{"tokens", DType::i32, {max_len_}, 0.0, vocab_},
          {"attention_mask", DType::i32, {max_len_}, 0.0, 2},
          {"lengths", DType::i32, {}, 0.0, max_len_ + 1},
          {"labels", DType::i32, {}, -1.0, classes}};
}

void TokenizedTexts::get_tensors(size_t i, void* const* out) const {
  if (i >= labels_.size())
    throw std::out_of_range("TokenizedTexts: index " + std::to_string(i) + " >= size " + std::to_string(labels_.size()));
  const size_t T = static_cast<size_t>(max_len_), n = offsets_[i + 1] - offsets_[i];
  auto* tok = static_cast<int32_t*>(out[0]);
  auto* mask = static_cast<int32_t*>(out[1]);
  std::copy_n(tokens_.data() + offsets_[i], n, tok);
  std::fill(tok + n, tok + T, pad_);
  std::fill(mask, mask + n, 1);
  std::fill(mask + n, mask + T, 0);
  *static_cast<int32_t*>(out[2]) = static_cast<int32_t>(n);
  *static_cast<int32_t*>(out[3]) = labels_[i];
}

size_t TokenizedTexts::resident_bytes() const {
  return tokens_.capacity() * sizeof(int32_t) + offsets_.capacity() * sizeof(uint64_t) +
         labels_.capacity() * sizeof(int32_t);
}

}  // namespace memfit::data
