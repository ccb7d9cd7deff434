#include "data/text.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "data/draw.hpp"

namespace fs = std::filesystem;

namespace memfit::data {
namespace {

// "source:LINE (byte OFFSET)" of byte offset `at` of `text`.
std::string where(std::string_view text, size_t at, const std::string& source) {
  const size_t line = 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<ptrdiff_t>(at), '\n'));
  return source + ":" + std::to_string(line) + " (byte " + std::to_string(at) + ")";
}

std::string show(char32_t c) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(c));
  if (c >= 0x20 && c < 0x7f) return std::string("'") + static_cast<char>(c) + "' (" + buf + ")";
  return buf;
}

const uint64_t kSplitStream = rng::name_hash("data.text_split");

// Calls fn(code point) for each character of UTF-8 text, in order; throws
// as decode_utf8 does. The tokenizers read text through it without a copy
// of the text in code points (4 bytes a character).
template <class Fn>
void for_each_code_point(std::string_view text, const std::string& source, Fn&& fn) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    size_t len;
    char32_t cp;
    if (c < 0x80) {
      fn(static_cast<char32_t>(c));
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      throw std::runtime_error(where(text, i, source) + ": invalid UTF-8 (a byte 0x" +
                               [&] { char b[8]; std::snprintf(b, sizeof b, "%02X", c); return std::string(b); }() +
                               " cannot start a character)");
    }
    if (i + len > n) throw std::runtime_error(where(text, i, source) + ": invalid UTF-8 (a truncated character)");
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80)
        throw std::runtime_error(where(text, i, source) + ": invalid UTF-8 (a character cut short)");
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    static constexpr char32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len]) throw std::runtime_error(where(text, i, source) + ": invalid UTF-8 (an overlong encoding)");
    if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
      throw std::runtime_error(where(text, i, source) + ": invalid UTF-8 (not a Unicode scalar value)");
    fn(cp);
    i += len;
  }
}

}  // namespace

std::vector<char32_t> decode_utf8(std::string_view text, const std::string& source) {
  std::vector<char32_t> out;
  out.reserve(text.size());
  for_each_code_point(text, source, [&](char32_t c) { out.push_back(c); });
  return out;
}

void check_utf8(std::string_view text, const std::string& source) {
  for_each_code_point(text, source, [](char32_t) {});
}

std::string encode_utf8(const std::u32string& cps) {
  std::string s;
  s.reserve(cps.size());
  for (char32_t c : cps) {
    if (c < 0x80) {
      s += static_cast<char>(c);
    } else if (c < 0x800) {
      s += static_cast<char>(0xC0 | (c >> 6));
      s += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      s += static_cast<char>(0xE0 | (c >> 12));
      s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (c >> 18));
      s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return s;
}

// ---- char tokenizer ------------------------------------------------------------

CharTokenizer::CharTokenizer(std::u32string alphabet) : alphabet_(std::move(alphabet)) {}

CharTokenizer CharTokenizer::from_text(std::string_view text, const std::string& source) {
  return from_texts({text}, source);
}

CharTokenizer CharTokenizer::from_texts(const std::vector<std::string_view>& parts, const std::string& source) {
  std::set<char32_t> seen;
  std::vector<bool> ascii(128, false);
  for (std::string_view text : parts)
    for_each_code_point(text, source, [&](char32_t c) {
      if (c < 128) ascii[c] = true;
      else seen.insert(c);
    });
  for (char32_t c = 0; c < 128; ++c)
    if (ascii[c]) seen.insert(c);
  if (seen.empty()) throw std::runtime_error(source + ": no text to build a char tokenizer from");
  return CharTokenizer(std::u32string(seen.begin(), seen.end()));
}

CharTokenizer CharTokenizer::load(const std::string& path) {
  const std::string text = detail::read_file_bounded(path, size_t(64) << 20, "tokenizer");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": not a tokenizer file (" + e.what() + ")");
  }
  return from_saved(j, path);
}

CharTokenizer CharTokenizer::from_saved(const nlohmann::json& j, const std::string& path) {
  if (!j.is_object() || j.value("tokenizer", "") != "char" || !j.contains("alphabet") || !j["alphabet"].is_array())
    throw std::runtime_error(path + ": not a char tokenizer file (expected {\"tokenizer\": \"char\", \"alphabet\": [...]})");
  std::u32string a;
  for (const auto& v : j["alphabet"]) {
    if (!v.is_number_unsigned() || v.get<uint64_t>() > 0x10FFFF)
      throw std::runtime_error(path + ": the alphabet holds something that is not a code point");
    const auto c = static_cast<char32_t>(v.get<uint64_t>());
    if (!a.empty() && c <= a.back()) throw std::runtime_error(path + ": the alphabet is not sorted and distinct");
    a += c;
  }
  if (a.empty()) throw std::runtime_error(path + ": the alphabet is empty");
  return CharTokenizer(std::move(a));
}

std::string CharTokenizer::saved() const {
  nlohmann::json j;
  j["tokenizer"] = "char";
  j["alphabet"] = nlohmann::json::array();
  for (char32_t c : alphabet_) j["alphabet"].push_back(static_cast<uint32_t>(c));
  return j.dump() + "\n";
}

std::vector<int32_t> CharTokenizer::encode(std::string_view text, const std::string& source) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());  // at most one id a byte; shrunk below when the text is not ASCII
  size_t line = 1;
  for_each_code_point(text, source, [&](char32_t c) {
    auto it = std::lower_bound(alphabet_.begin(), alphabet_.end(), c);
    if (it == alphabet_.end() || *it != c)
      throw std::runtime_error(source + ":" + std::to_string(line) + ": the character " + show(c) +
                               " is not in the tokenizer's alphabet of " + std::to_string(alphabet_.size()));
    ids.push_back(static_cast<int32_t>(it - alphabet_.begin()));
    line += c == U'\n';
  });
  if (ids.capacity() > ids.size() + ids.size() / 16) ids.shrink_to_fit();
  return ids;
}

std::string CharTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::u32string cps;
  cps.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= alphabet_.size())
      throw std::out_of_range("token id " + std::to_string(id) + " is outside the alphabet of " +
                              std::to_string(alphabet_.size()));
    cps += alphabet_[static_cast<size_t>(id)];
  }
  return encode_utf8(cps);
}

// ---- fortunes and splits -------------------------------------------------------

namespace {

// Calls fn(line) for each line of text, without its "\n" or a trailing "\r".
template <class Fn>
void for_each_line(std::string_view text, Fn&& fn) {
  size_t i = 0;
  while (i < text.size()) {
    size_t e = text.find('\n', i);
    if (e == std::string_view::npos) e = text.size();
    std::string_view line = text.substr(i, e - i);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    fn(line);
    i = e + 1;
  }
}

// The runs of lines between separator lines (trailing newlines trimmed,
// empty runs dropped).
template <class IsSeparator>
std::vector<std::string> split_at(std::string_view text, IsSeparator&& is_separator) {
  std::vector<std::string> out;
  std::string cur;
  auto flush = [&] {
    while (!cur.empty() && cur.back() == '\n') cur.pop_back();
    if (!cur.empty()) out.push_back(std::move(cur));
    cur.clear();
  };
  for_each_line(text, [&](std::string_view line) {
    if (is_separator(line)) {
      flush();
    } else {
      cur.append(line);
      cur += '\n';
    }
  });
  flush();
  return out;
}

}  // namespace

std::vector<std::string> split_fortunes(std::string_view text) {
  return split_at(text, [](std::string_view line) { return line == "%"; });
}

EntrySplit split_entries(std::vector<std::string> entries, double fraction, uint64_t seed) {
  if (!(fraction >= 0.0 && fraction < 1.0))
    throw std::invalid_argument("the held-out fraction must be in [0, 1), got " + std::to_string(fraction));
  EntrySplit s;
  const uint64_t key = rng::stream_key(seed, kSplitStream, 0);
  for (size_t i = 0; i < entries.size(); ++i)
    (static_cast<double>(detail::draw48(key, i)) < fraction * 281474976710656.0 ? s.held_out : s.train)
        .push_back(std::move(entries[i]));
  return s;
}

std::string join_entries(const std::vector<std::string>& entries) {
  size_t n = 0;
  for (const std::string& e : entries) n += e.size() + 2;
  std::string t;
  t.reserve(n);
  for (const std::string& e : entries) {
    t += e;
    t += "\n\n";
  }
  return t;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw std::runtime_error("cannot read " + path);
  return ss.str();
}

std::vector<std::string> split_paragraphs(std::string_view text) {
  return split_at(text, [](std::string_view line) { return line.find_first_not_of(" \t\f\v") == std::string_view::npos; });
}

namespace {

bool is_fortune_file(std::string_view text) {
  bool found = false;
  for_each_line(text, [&](std::string_view line) { found = found || line == "%"; });
  return found;
}

void add_documents(Corpus& c, const std::string& text, const std::string& source) {
  check_utf8(text, source);  // throws naming the file and line
  std::vector<std::string> docs = is_fortune_file(text) ? split_fortunes(text) : split_paragraphs(text);
  c.bytes += text.size();
  c.files.push_back(source);
  for (std::string& d : docs) c.documents.push_back(std::move(d));
}

}  // namespace

Corpus read_corpus(const std::string& path) {
  Corpus c;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw std::runtime_error("no text at " + path + ": no such file or directory");
  if (fs::is_regular_file(st)) {
    const std::string text = read_text_file(path);
    if (text.find('\0') != std::string::npos)
      throw std::runtime_error(path + " is not a text file (it holds NUL bytes)");
    add_documents(c, text, path);
  } else if (fs::is_directory(st)) {
    std::vector<fs::path> entries;
    for (const fs::directory_entry& e : fs::directory_iterator(path, ec)) entries.push_back(e.path());
    if (ec) throw std::runtime_error("cannot list " + path + ": " + ec.message());
    std::sort(entries.begin(), entries.end());
    std::set<fs::path> seen;
    for (const fs::path& p : entries) {
      if (!fs::is_regular_file(p, ec) || p.filename().string().front() == '.') continue;
      const fs::path canon = fs::canonical(p, ec);
      if (ec || !seen.insert(canon).second) {
        ++c.skipped;
        continue;
      }
      const std::string text = read_text_file(p.string());
      if (text.find('\0') != std::string::npos) {
        ++c.skipped;
        continue;
      }
      add_documents(c, text, p.string());
    }
  } else {
    throw std::runtime_error(path + " is neither a text file nor a directory");
  }
  if (c.documents.empty())
    throw std::runtime_error("no text in " + path + (c.files.empty() ? ": no text files there" : ": the files are empty"));
  return c;
}

// ---- token windows -------------------------------------------------------------

TokenWindows::TokenWindows(std::shared_ptr<const std::vector<int32_t>> tokens, int64_t block, int64_t vocab,
                           std::optional<uint64_t> random_seed)
    : tokens_(std::move(tokens)), block_(block), vocab_(vocab), seed_(random_seed) {
  if (!tokens_) throw std::invalid_argument("TokenWindows: no tokens");
  if (block_ < 1) throw std::invalid_argument("TokenWindows: the block size must be at least 1");
  if (vocab_ < 1 || vocab_ > (int64_t(1) << 31) - 1) throw std::invalid_argument("TokenWindows: bad vocabulary size");
  if (static_cast<int64_t>(tokens_->size()) <= block_)
    throw std::invalid_argument("the text has " + std::to_string(tokens_->size()) + " tokens, not one window of " +
                                std::to_string(block_) + " plus its next token (lower --block-size or add text)");
  for (size_t i = 0; i < tokens_->size(); ++i)
    if ((*tokens_)[i] < 0 || (*tokens_)[i] >= vocab_)
      throw std::invalid_argument("token " + std::to_string(i) + " has id " + std::to_string((*tokens_)[i]) +
                                  ", outside the vocabulary of " + std::to_string(vocab_));
  windows_ = (tokens_->size() - 1) / static_cast<size_t>(block_);
}

std::vector<TensorSpec> TokenWindows::tensors() const {
  return {{"tokens", DType::i32, {block_}, 0.0, vocab_}, {"targets", DType::i32, {block_}, -1.0, vocab_}};
}

size_t TokenWindows::start_of(size_t i, uint64_t epoch) const {
  if (i >= windows_)
    throw std::out_of_range("TokenWindows: index " + std::to_string(i) + " >= size " + std::to_string(windows_));
  if (!seed_) return i * static_cast<size_t>(block_);
  static const uint64_t stream = rng::name_hash("data.windows");
  const uint64_t starts = tokens_->size() - static_cast<size_t>(block_);  // s + T <= N - 1
  return static_cast<size_t>(detail::draw_below(rng::stream_key(*seed_, stream, epoch), i, starts));
}

void TokenWindows::get_tensors_at(size_t i, uint64_t epoch, void* const* out) const {
  const int32_t* src = tokens_->data() + start_of(i, epoch);
  const size_t bytes = static_cast<size_t>(block_) * sizeof(int32_t);
  std::copy_n(reinterpret_cast<const std::byte*>(src), bytes, static_cast<std::byte*>(out[0]));
  std::copy_n(reinterpret_cast<const std::byte*>(src + 1), bytes, static_cast<std::byte*>(out[1]));
}

}  // namespace memfit::data
