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

}  // namespace

std::vector<char32_t> decode_utf8(std::string_view text, const std::string& source) {
  std::vector<char32_t> out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    size_t len;
    char32_t cp;
    if (c < 0x80) {
      out.push_back(c);
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
    out.push_back(cp);
    i += len;
  }
  return out;
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
  const std::vector<char32_t> cps = decode_utf8(text, source);
  if (cps.empty()) throw std::runtime_error(source + ": no text to build a char tokenizer from");
  std::set<char32_t> seen(cps.begin(), cps.end());
  return CharTokenizer(std::u32string(seen.begin(), seen.end()));
}

CharTokenizer CharTokenizer::load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read the tokenizer file " + path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": not a tokenizer file (" + e.what() + ")");
  }
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

void CharTokenizer::save(const std::string& path) const {
  nlohmann::json j;
  j["tokenizer"] = "char";
  j["alphabet"] = nlohmann::json::array();
  for (char32_t c : alphabet_) j["alphabet"].push_back(static_cast<uint32_t>(c));
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << j.dump() << "\n";
    f.flush();
    if (!f) {
      std::remove(tmp.c_str());
      throw std::runtime_error("cannot write the tokenizer file " + path);
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot write the tokenizer file " + path + ": " + ec.message());
  }
}

std::vector<int32_t> CharTokenizer::encode(std::string_view text, const std::string& source) const {
  const std::vector<char32_t> cps = decode_utf8(text, source);
  std::vector<int32_t> ids;
  ids.reserve(cps.size());
  size_t line = 1;
  for (char32_t c : cps) {
    auto it = std::lower_bound(alphabet_.begin(), alphabet_.end(), c);
    if (it == alphabet_.end() || *it != c)
      throw std::runtime_error(source + ":" + std::to_string(line) + ": the character " + show(c) +
                               " is not in the tokenizer's alphabet of " + std::to_string(alphabet_.size()));
    ids.push_back(static_cast<int32_t>(it - alphabet_.begin()));
    line += c == U'\n';
  }
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

std::vector<std::string> split_fortunes(std::string_view text) {
  std::vector<std::string> out;
  std::string cur;
  auto flush = [&] {
    while (!cur.empty() && (cur.back() == '\n' || cur.back() == '\r')) cur.pop_back();
    if (!cur.empty()) out.push_back(std::move(cur));
    cur.clear();
  };
  size_t i = 0;
  while (i < text.size()) {
    size_t e = text.find('\n', i);
    if (e == std::string_view::npos) e = text.size();
    std::string_view line = text.substr(i, e - i);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line == "%") {
      flush();
    } else {
      cur.append(line);
      cur += '\n';
    }
    i = e + 1;
  }
  flush();
  return out;
}

EntrySplit split_entries(const std::vector<std::string>& entries, double fraction, uint64_t seed) {
  if (!(fraction >= 0.0 && fraction < 1.0))
    throw std::invalid_argument("the held-out fraction must be in [0, 1), got " + std::to_string(fraction));
  EntrySplit s;
  const uint64_t key = rng::stream_key(seed, kSplitStream, 0);
  for (size_t i = 0; i < entries.size(); ++i)
    (static_cast<double>(detail::draw48(key, i)) < fraction * 281474976710656.0 ? s.held_out : s.train)
        .push_back(entries[i]);
  return s;
}

std::string join_entries(const std::vector<std::string>& entries) {
  std::string t;
  for (const std::string& e : entries) {
    t += e;
    t += "\n\n";
  }
  return t;
}

// ---- token windows -------------------------------------------------------------

TokenWindows::TokenWindows(std::shared_ptr<const std::vector<int32_t>> tokens, int64_t block, int64_t vocab)
    : tokens_(std::move(tokens)), block_(block), vocab_(vocab) {
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

void TokenWindows::get_tensors(size_t i, void* const* out) const {
  if (i >= windows_)
    throw std::out_of_range("TokenWindows: index " + std::to_string(i) + " >= size " + std::to_string(windows_));
  const int32_t* src = tokens_->data() + i * static_cast<size_t>(block_);
  const size_t bytes = static_cast<size_t>(block_) * sizeof(int32_t);
  std::copy_n(reinterpret_cast<const std::byte*>(src), bytes, static_cast<std::byte*>(out[0]));
  std::copy_n(reinterpret_cast<const std::byte*>(src + 1), bytes, static_cast<std::byte*>(out[1]));
}

}  // namespace memfit::data
