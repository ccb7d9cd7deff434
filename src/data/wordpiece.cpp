#include "data/wordpiece.hpp"

#include <utf8proc.h>

#include <stdexcept>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "data/text.hpp"

namespace memfit::data {
namespace {

constexpr size_t kMaxFileBytes = size_t(64) << 20;  // BERT's vocab.txt is 0.2 MB
constexpr size_t kMaxTokens = size_t(1) << 24;
const char* const kPrefix = "##";

// Unicode's White_Space (Rust's char::is_whitespace, which tokenizers uses).
bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Cc, Cf and Co other than tab, newline and carriage return (tokenizers'
// is_control: unicode_categories' is_other, which leaves out Cn and Cs).
bool is_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  const utf8proc_category_t k = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CO;
}

// The CJK Unified Ideographs blocks (BERT's _is_chinese_char).
bool is_cjk(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// ASCII symbols (33-47, 58-64, 91-96, 123-126) and Unicode P*.
bool is_punctuation(char32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
  if (c < 128) return false;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return true;
    default:
      return false;
  }
}

void append_utf8(std::string& s, char32_t c) {
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else {
    utf8proc_uint8_t buf[4];
    const utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buf);
    s.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
  }
}

// Steps 1-4 of the header: the normalized text's code points.
std::u32string normalize_cps(std::string_view text, const std::string& source) {
  // 1 and 2: clean and space out CJK ideographs, into UTF-8 for utf8proc.
  std::string cleaned;
  cleaned.reserve(text.size() + 16);
  bool ascii = true;
  for (char32_t c : decode_utf8(text, source)) {  // throws naming the line
    if (c == 0 || c == 0xFFFD || is_control(c)) continue;
    if (is_whitespace(c)) c = ' ';
    ascii &= c < 0x80;
    if (is_cjk(c)) {
      cleaned += ' ';
      append_utf8(cleaned, c);
      cleaned += ' ';
    } else {
      append_utf8(cleaned, c);
    }
  }
  std::u32string out;
  out.reserve(cleaned.size());
  if (ascii) {  // NFD leaves ASCII as it is and it has no marks
    for (unsigned char c : cleaned) out += (c >= 'A' && c <= 'Z') ? char32_t(c + 32) : char32_t(c);
    return out;
  }
  // 3: NFD (decomposed and canonically ordered), dropping Mn; 4: lower case.
  std::vector<utf8proc_int32_t> nfd(cleaned.size() + 16);
  const auto* s = reinterpret_cast<const utf8proc_uint8_t*>(cleaned.data());
  const auto opts = static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
  utf8proc_ssize_t n = utf8proc_decompose(s, static_cast<utf8proc_ssize_t>(cleaned.size()), nfd.data(),
                                          static_cast<utf8proc_ssize_t>(nfd.size()), opts);
  if (n > static_cast<utf8proc_ssize_t>(nfd.size())) {
    nfd.resize(static_cast<size_t>(n));
    n = utf8proc_decompose(s, static_cast<utf8proc_ssize_t>(cleaned.size()), nfd.data(), n, opts);
  }
  if (n < 0)
    throw std::runtime_error(source + ": NFD failed (" + utf8proc_errmsg(n) + ")");
  for (utf8proc_ssize_t i = 0; i < n; ++i) {
    const utf8proc_int32_t c = nfd[static_cast<size_t>(i)];
    if (utf8proc_category(c) == UTF8PROC_CATEGORY_MN) continue;
    out += static_cast<char32_t>(utf8proc_tolower(c));
  }
  return out;
}

}  // namespace

struct WordPieceTokenizer::Impl {
  std::vector<std::string> tokens;                      // by id
  std::unordered_map<std::string_view, int32_t> ids;    // keys view into tokens
  int32_t cls = -1, sep = -1, pad = -1, unk = -1;

  int32_t find(std::string_view t) const {
    auto it = ids.find(t);
    return it == ids.end() ? -1 : it->second;
  }

  // The ids of one word (its UTF-8 bytes, `chars` characters) appended to out.
  void word(const std::string& w, size_t chars, std::vector<int32_t>& out, std::string& scratch) const {
    if (chars > kMaxWordChars) {
      out.push_back(unk);
      return;
    }
    if (const int32_t id = find(w); id >= 0) {
      out.push_back(id);
      return;
    }
    // Character starts in bytes (and the end).
    std::vector<size_t> at;
    at.reserve(chars + 1);
    for (size_t i = 0; i < w.size(); ++i)
      if ((static_cast<unsigned char>(w[i]) & 0xC0) != 0x80) at.push_back(i);
    at.push_back(w.size());
    const size_t before = out.size();
    for (size_t start = 0; start + 1 < at.size();) {
      int32_t id = -1;
      size_t end = at.size() - 1;
      for (; end > start; --end) {
        const std::string_view sub(w.data() + at[start], at[end] - at[start]);
        if (start == 0) {
          id = find(sub);
        } else {
          scratch.assign(kPrefix);
          scratch.append(sub);
          id = find(scratch);
        }
        if (id >= 0) break;
      }
      if (id < 0) {
        out.resize(before);
        out.push_back(unk);
        return;
      }
      out.push_back(id);
      start = end;
    }
  }
};

WordPieceTokenizer WordPieceTokenizer::from_tokens(std::vector<std::string> tokens, const std::string& where) {
  if (tokens.empty()) throw std::runtime_error(where + ": an empty vocabulary");
  if (tokens.size() > kMaxTokens)
    throw std::runtime_error(where + ": " + std::to_string(tokens.size()) + " tokens, more than a vocabulary has");
  auto m = std::make_shared<Impl>();
  m->tokens = std::move(tokens);
  m->ids.reserve(m->tokens.size());
  for (size_t i = 0; i < m->tokens.size(); ++i) {
    check_utf8(m->tokens[i], where + " (token " + std::to_string(i) + ")");
    m->ids[m->tokens[i]] = static_cast<int32_t>(i);  // a token given twice keeps its last id
  }
  m->unk = m->find("[UNK]");
  if (m->unk < 0) throw std::runtime_error(where + ": no [UNK] token in the vocabulary");
  m->cls = m->find("[CLS]");
  m->sep = m->find("[SEP]");
  m->pad = m->find("[PAD]");
  return WordPieceTokenizer(std::move(m));
}

WordPieceTokenizer WordPieceTokenizer::from_vocab_file(const std::string& path) {
  const std::string text = detail::read_file_bounded(path, kMaxFileBytes, "WordPiece vocabulary");
  std::vector<std::string> tokens;
  size_t i = 0;
  while (i < text.size()) {
    size_t e = text.find('\n', i);
    if (e == std::string::npos) e = text.size();
    const std::string_view line(text.data() + i, e - i);
    i = e + 1;
    std::u32string cps;
    for (char32_t c : decode_utf8(line, path + ":" + std::to_string(tokens.size() + 1))) cps += c;
    while (!cps.empty() && is_whitespace(cps.back())) cps.pop_back();
    tokens.push_back(encode_utf8(cps));
  }
  return from_tokens(std::move(tokens), path);
}

WordPieceTokenizer WordPieceTokenizer::from_saved(const nlohmann::json& j, const std::string& path) {
  const auto bad = [&](const std::string& why) {
    return std::runtime_error(path + ": not a wordpiece tokenizer file (" + why + ")");
  };
  if (!j.contains("version") || j["version"] != 1) throw bad("expected \"version\": 1");
  // The one configuration memfit runs: BERT uncased.
  for (const char* flag : {"lowercase", "strip_accents", "clean_text", "handle_chinese_chars"})
    if (!j.contains(flag) || j[flag] != true) throw bad(std::string("expected \"") + flag + "\": true (BERT uncased)");
  if (!j.contains("unk_token") || j["unk_token"] != "[UNK]" || !j.contains("continuing_subword_prefix") ||
      j["continuing_subword_prefix"] != kPrefix || !j.contains("max_input_chars_per_word") ||
      j["max_input_chars_per_word"] != kMaxWordChars)
    throw bad("expected [UNK], \"##\" and 100 characters a word");
  if (!j.contains("vocab") || !j["vocab"].is_array()) throw bad("no \"vocab\" array");
  std::vector<std::string> tokens;
  tokens.reserve(j["vocab"].size());
  for (const auto& t : j["vocab"]) {
    if (!t.is_string()) throw bad("token " + std::to_string(tokens.size()) + " is not a string");
    tokens.push_back(t.get<std::string>());
  }
  return from_tokens(std::move(tokens), path);
}

std::string WordPieceTokenizer::saved() const {
  nlohmann::json j;
  j["tokenizer"] = "wordpiece";
  j["version"] = 1;
  j["lowercase"] = true;
  j["strip_accents"] = true;
  j["clean_text"] = true;
  j["handle_chinese_chars"] = true;
  j["unk_token"] = "[UNK]";
  j["continuing_subword_prefix"] = kPrefix;
  j["max_input_chars_per_word"] = kMaxWordChars;
  j["vocab"] = impl_->tokens;
  return j.dump() + "\n";
}

size_t WordPieceTokenizer::vocab_size() const { return impl_->tokens.size(); }
int32_t WordPieceTokenizer::cls_id() const { return impl_->cls; }
int32_t WordPieceTokenizer::sep_id() const { return impl_->sep; }
int32_t WordPieceTokenizer::pad_id() const { return impl_->pad; }
int32_t WordPieceTokenizer::unk_id() const { return impl_->unk; }
int32_t WordPieceTokenizer::token_to_id(std::string_view token) const { return impl_->find(token); }

const std::string& WordPieceTokenizer::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->tokens.size())
    throw std::out_of_range("token id " + std::to_string(id) + " is outside the WordPiece vocabulary of " +
                            std::to_string(impl_->tokens.size()));
  return impl_->tokens[static_cast<size_t>(id)];
}

std::string WordPieceTokenizer::normalize(std::string_view text, const std::string& source) const {
  return encode_utf8(normalize_cps(text, source));
}

std::vector<int32_t> WordPieceTokenizer::encode(std::string_view text, const std::string& source) const {
  const std::u32string cps = normalize_cps(text, source);
  std::vector<int32_t> out;
  out.reserve(cps.size() / 4 + 16);
  // Words seen before in this text: where their ids first went in `out`.
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>> seen;
  std::string w, scratch;
  size_t chars = 0;
  const auto flush = [&] {
    if (chars == 0) return;
    if (auto it = seen.find(w); it != seen.end()) {
      const auto [at, n] = it->second;
      for (uint32_t k = 0; k < n; ++k) {
        const int32_t id = out[at + k];
        out.push_back(id);
      }
    } else {
      const size_t at = out.size();
      impl_->word(w, chars, out, scratch);
      seen.emplace(w, std::make_pair(static_cast<uint32_t>(at), static_cast<uint32_t>(out.size() - at)));
    }
    w.clear();
    chars = 0;
  };
  for (char32_t c : cps) {
    if (is_whitespace(c)) {
      flush();
    } else if (is_punctuation(c)) {
      flush();
      append_utf8(w, c);
      chars = 1;
      flush();
    } else {
      append_utf8(w, c);
      ++chars;
    }
  }
  flush();
  return out;
}

std::string WordPieceTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string s;
  for (int32_t id : ids) {
    const std::string& t = id_to_token(id);
    if (t.size() > 2 && t.compare(0, 2, kPrefix) == 0) {
      s.append(t, 2, std::string::npos);
    } else {
      if (!s.empty()) s += ' ';
      s += t;
    }
  }
  return s;
}

}  // namespace memfit::data
