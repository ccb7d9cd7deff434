#include "data/bpe.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

#include "data/text.hpp"

namespace fs = std::filesystem;

namespace memfit::data {

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

constexpr size_t kMaxFileBytes = size_t(64) << 20;  // GPT-2's ranks are 0.8 MB, saved 0.6 MB
constexpr int64_t kMaxRanks = int64_t(1) << 24;
constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
const char* const kEndOfText = "<|endoftext|>";

// kGpt2Pattern for PCRE2: \s spelled out as Unicode's White_Space (what
// Rust's regex, and so tiktoken, means by \s). PCRE2's own \s under UCP
// leaves out U+0085 (NEL), which White_Space holds.
std::string pcre2_pattern() {
  const std::string ws = R"(\t-\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
  return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^)" + ws + R"(\p{L}\p{N}]+|[)" + ws + R"(]+(?![^)" + ws +
         R"(])|[)" + ws + "]+";
}

// ---- base64 (the .tiktoken file's and the saved file's token spelling) ----

const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = uint32_t(uint8_t(in[i])) << 16 | uint32_t(uint8_t(in[i + 1])) << 8 | uint8_t(in[i + 2]);
    for (int k = 18; k >= 0; k -= 6) out += kB64[(v >> k) & 63];
  }
  if (i < in.size()) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    if (i + 1 < in.size()) v |= uint32_t(uint8_t(in[i + 1])) << 8;
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += i + 1 < in.size() ? kB64[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

// Standard base64, padded or not; false for anything else.
bool base64_decode(std::string_view in, std::string& out) {
  out.clear();
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  if (in.size() % 4 == 1) return false;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v;
    if (c >= 'A' && c <= 'Z') v = c - 'A';
    else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
    else if (c >= '0' && c <= '9') v = c - '0' + 52;
    else if (c == '+') v = 62;
    else if (c == '/') v = 63;
    else return false;
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return true;
}

}  // namespace

// ---- the ranks and the compiled pattern ------------------------------------------

struct Gpt2Tokenizer::Impl {
  std::string blob;                                      // every token's bytes, back to back
  std::vector<uint32_t> off, len;                        // by rank; len 0: no token has that rank
  std::unordered_map<std::string_view, int32_t> ranks;   // keys view into blob
  int32_t eot = 0;
  pcre2_code* re = nullptr;
  bool jit = false;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() { pcre2_code_free(re); }

  uint32_t rank(std::string_view bytes) const {
    auto it = ranks.find(bytes);
    return it == ranks.end() ? kNone : static_cast<uint32_t>(it->second);
  }
};

namespace {

using Ranked = std::vector<std::pair<std::string, int64_t>>;  // token bytes, rank

// The tokenizer of (bytes, rank) pairs and the special token's id (none:
// the first id after the ranks); `where` names the source in errors.
std::shared_ptr<const Gpt2Tokenizer::Impl> build(Ranked tokens, std::optional<int64_t> eot_given,
                                                 const std::string& where) {
  if (tokens.empty()) throw std::runtime_error(where + ": no BPE ranks in it");
  if (static_cast<int64_t>(tokens.size()) > kMaxRanks)
    throw std::runtime_error(where + ": " + std::to_string(tokens.size()) + " ranks, more than a BPE vocabulary has");
  auto m = std::make_shared<Gpt2Tokenizer::Impl>();
  int64_t max_rank = -1;
  size_t bytes = 0;
  for (const auto& [tok, r] : tokens) {
    if (r < 0 || r >= kMaxRanks) throw std::runtime_error(where + ": the rank " + std::to_string(r) + " is out of range");
    if (tok.empty()) throw std::runtime_error(where + ": an empty token (rank " + std::to_string(r) + ")");
    max_rank = std::max(max_rank, r);
    bytes += tok.size();
  }
  // Gaps are allowed, but the table is by rank: a few ranks spread over 2^24
  // ids would cost far more memory than the file's size.
  if (max_rank + 1 > 2 * static_cast<int64_t>(tokens.size()) + 256)
    throw std::runtime_error(where + ": " + std::to_string(tokens.size()) + " tokens with ranks up to " +
                             std::to_string(max_rank) + " (more gaps than tokens)");
  const int64_t eot = eot_given.value_or(max_rank + 1);
  if (eot < 0 || eot >= kMaxRanks)
    throw std::runtime_error(where + ": the id of " + kEndOfText + " (" + std::to_string(eot) + ") is out of range");
  m->blob.reserve(bytes);
  m->off.assign(static_cast<size_t>(max_rank) + 1, 0);
  m->len.assign(static_cast<size_t>(max_rank) + 1, 0);
  for (const auto& [tok, r] : tokens) {
    if (m->len[static_cast<size_t>(r)] != 0)
      throw std::runtime_error(where + ": the rank " + std::to_string(r) + " is given twice");
    m->off[static_cast<size_t>(r)] = static_cast<uint32_t>(m->blob.size());
    m->len[static_cast<size_t>(r)] = static_cast<uint32_t>(tok.size());
    m->blob += tok;
  }
  m->ranks.reserve(tokens.size());
  for (size_t r = 0; r < m->len.size(); ++r) {
    if (m->len[r] == 0) continue;
    const std::string_view t(m->blob.data() + m->off[r], m->len[r]);
    if (!m->ranks.emplace(t, static_cast<int32_t>(r)).second)
      throw std::runtime_error(where + ": the token of rank " + std::to_string(r) + " is given twice (as rank " +
                               std::to_string(m->ranks.at(t)) + " too)");
  }
  for (int b = 0; b < 256; ++b)
    if (!m->ranks.count(std::string_view(std::string(1, static_cast<char>(b)))))
      throw std::runtime_error(where + ": no token for the byte " + std::to_string(b) +
                               " (byte-level BPE needs all 256)");
  if (eot <= max_rank && m->len[static_cast<size_t>(eot)] != 0)
    throw std::runtime_error(where + ": the id of " + kEndOfText + " (" + std::to_string(eot) + ") is a BPE rank too");
  m->eot = static_cast<int32_t>(eot);

  int err = 0;
  PCRE2_SIZE at = 0;
  const std::string pat = pcre2_pattern();
  m->re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.c_str()), pat.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, &err, &at, nullptr);
  if (!m->re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw std::logic_error("GPT-2's pattern does not compile at " + std::to_string(at) + ": " +
                           reinterpret_cast<const char*>(msg));
  }
  m->jit = pcre2_jit_compile(m->re, PCRE2_JIT_COMPLETE) == 0;  // otherwise the interpreter
  return m;
}

Ranked read_tiktoken(const std::string& path) {
  const std::string text = detail::read_file_bounded(path, kMaxFileBytes, "GPT-2 ranks");
  Ranked out;
  size_t i = 0, line = 0;
  std::string tok;
  while (i < text.size()) {
    size_t e = text.find('\n', i);
    if (e == std::string::npos) e = text.size();
    std::string_view l(text.data() + i, e - i);
    i = e + 1;
    ++line;
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    if (l.empty()) continue;
    const size_t sp = l.find(' ');
    const auto bad = [&](const std::string& why) {
      return std::runtime_error(path + ":" + std::to_string(line) + ": not a .tiktoken ranks line (" + why +
                                "; expected a base64 token, a space and its rank)");
    };
    if (sp == std::string_view::npos || l.find(' ', sp + 1) != std::string_view::npos) throw bad("not two fields");
    if (!base64_decode(l.substr(0, sp), tok)) throw bad("the token is not base64");
    const std::string_view r = l.substr(sp + 1);
    if (r.empty() || r.size() > 9 || r.find_first_not_of("0123456789") != std::string_view::npos)
      throw bad("the rank is not a number");
    out.emplace_back(tok, std::stoll(std::string(r)));
  }
  return out;
}

// Hugging Face's GPT-2 files: vocab.json {token: id} in the byte-to-unicode
// alphabet, merges.txt ("#version" line, then "a b" a line, in rank order).
std::pair<Ranked, std::optional<int64_t>> read_hf_folder(const fs::path& dir) {
  const std::string vpath = (dir / "vocab.json").string(), mpath = (dir / "merges.txt").string();
  if (!fs::is_regular_file(vpath) || !fs::is_regular_file(mpath))
    throw std::runtime_error(dir.string() + ": a GPT-2 folder needs vocab.json and merges.txt");
  std::unordered_map<char32_t, unsigned char> from_unicode;
  for (int b = 0; b < 256; ++b) from_unicode[gpt2_byte_to_unicode(static_cast<unsigned char>(b))] = static_cast<unsigned char>(b);
  const auto to_bytes = [&](const std::string& s, const std::string& where) {
    std::string out;
    for (char32_t c : decode_utf8(s, where)) {
      auto it = from_unicode.find(c);
      if (it == from_unicode.end())
        throw std::runtime_error(where + ": the token '" + s + "' is not in GPT-2's byte alphabet");
      out += static_cast<char>(it->second);
    }
    return out;
  };
  nlohmann::json v;
  try {
    v = nlohmann::json::parse(detail::read_file_bounded(vpath, kMaxFileBytes, "GPT-2 vocabulary"));
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(vpath + ": not a vocab.json (" + e.what() + ")");
  }
  if (!v.is_object()) throw std::runtime_error(vpath + ": not a vocab.json (expected {\"token\": id, ...})");
  Ranked tokens;
  std::optional<int64_t> eot;
  std::unordered_map<std::string, int64_t> id_of;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!it.value().is_number_integer()) throw std::runtime_error(vpath + ": the id of '" + it.key() + "' is not an integer");
    const int64_t id = it.value().get<int64_t>();
    if (it.key() == kEndOfText) {
      eot = id;
      continue;
    }
    tokens.emplace_back(to_bytes(it.key(), vpath), id);
    id_of[tokens.back().first] = id;
  }
  // The merges must come in rank order: a pair's token outranks its parts
  // and every earlier merge's token, which is what makes merging by the
  // rank of a concatenation (tiktoken) the same as by the merge's line.
  const std::string merges = detail::read_file_bounded(mpath, kMaxFileBytes, "GPT-2 merges");
  size_t i = 0, line = 0;
  int64_t last = -1;
  while (i < merges.size()) {
    size_t e = merges.find('\n', i);
    if (e == std::string::npos) e = merges.size();
    std::string l = merges.substr(i, e - i);
    i = e + 1;
    ++line;
    if (!l.empty() && l.back() == '\r') l.pop_back();
    if (l.empty() || (line == 1 && l.rfind("#version", 0) == 0)) continue;
    const std::string where = mpath + ":" + std::to_string(line);
    const size_t sp = l.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == l.size() || l.find(' ', sp + 1) != std::string::npos)
      throw std::runtime_error(where + ": not a merge (expected two tokens and a space between)");
    const std::string a = to_bytes(l.substr(0, sp), where), b = to_bytes(l.substr(sp + 1), where);
    const auto ia = id_of.find(a), ib = id_of.find(b), iab = id_of.find(a + b);
    if (ia == id_of.end() || ib == id_of.end() || iab == id_of.end())
      throw std::runtime_error(where + ": the merge '" + l + "' or a part of it is not in vocab.json");
    if (iab->second <= last || iab->second <= ia->second || iab->second <= ib->second)
      throw std::runtime_error(where + ": the merge '" + l +
                               "' is out of rank order (memfit's BPE merges by vocab.json's ids, as tiktoken does)");
    last = iab->second;
  }
  return {std::move(tokens), eot};
}

}  // namespace

char32_t gpt2_byte_to_unicode(unsigned char b) {
  const auto printable = [](int c) { return (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF); };
  if (printable(b)) return b;
  char32_t n = 0;
  for (int c = 0; c < b; ++c) n += !printable(c);
  return 256 + n;
}

Gpt2Tokenizer Gpt2Tokenizer::from_file(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    auto [tokens, eot] = read_hf_folder(path);
    return Gpt2Tokenizer(build(std::move(tokens), eot, path));
  }
  return Gpt2Tokenizer(build(read_tiktoken(path), std::nullopt, path));
}

Gpt2Tokenizer Gpt2Tokenizer::from_saved(const nlohmann::json& j, const std::string& path) {
  const auto bad = [&](const std::string& why) { return std::runtime_error(path + ": not a gpt2 tokenizer file (" + why + ")"); };
  if (!j.contains("version") || j["version"] != 1) throw bad("expected \"version\": 1");
  if (!j.contains("pattern") || !j["pattern"].is_string() || j["pattern"].get<std::string>() != kGpt2Pattern)
    throw bad("its \"pattern\" is not GPT-2's pre-tokenizer pattern, the only one memfit runs");
  if (!j.contains("ranks") || !j["ranks"].is_array()) throw bad("no \"ranks\" array");
  if (!j.contains("special") || !j["special"].is_object() || !j["special"].contains(kEndOfText) ||
      !j["special"][kEndOfText].is_number_integer() || j["special"].size() != 1)
    throw bad("expected \"special\": {\"<|endoftext|>\": id}");
  Ranked tokens;
  tokens.reserve(j["ranks"].size());
  std::string tok;
  int64_t r = 0;
  for (const auto& t : j["ranks"]) {
    if (!t.is_null()) {  // null: no token has this rank
      if (!t.is_string() || !base64_decode(t.get_ref<const std::string&>(), tok))
        throw bad("rank " + std::to_string(r) + " is not a base64 token");
      tokens.emplace_back(tok, r);
    }
    ++r;
  }
  return Gpt2Tokenizer(build(std::move(tokens), j["special"][kEndOfText].get<int64_t>(), path));
}

std::string Gpt2Tokenizer::saved() const {
  nlohmann::json j;
  j["tokenizer"] = "gpt2";
  j["version"] = 1;
  j["pattern"] = kGpt2Pattern;
  j["special"] = {{kEndOfText, impl_->eot}};
  nlohmann::json ranks = nlohmann::json::array();
  for (size_t r = 0; r < impl_->len.size(); ++r)
    ranks.push_back(impl_->len[r] ? nlohmann::json(base64_encode(token_bytes(static_cast<int32_t>(r))))
                                  : nlohmann::json(nullptr));
  j["ranks"] = std::move(ranks);
  return j.dump() + "\n";
}

size_t Gpt2Tokenizer::vocab_size() const { return std::max(impl_->len.size(), size_t(impl_->eot) + 1); }
int32_t Gpt2Tokenizer::eot_id() const { return impl_->eot; }
size_t Gpt2Tokenizer::num_ranks() const { return impl_->len.size(); }

std::string_view Gpt2Tokenizer::token_bytes(int32_t id) const {
  if (id == impl_->eot) return kEndOfText;
  if (id < 0 || static_cast<size_t>(id) >= impl_->len.size() || impl_->len[static_cast<size_t>(id)] == 0)
    throw std::out_of_range("token id " + std::to_string(id) + " is not in GPT-2's vocabulary of " +
                            std::to_string(vocab_size()));
  return {impl_->blob.data() + impl_->off[static_cast<size_t>(id)], impl_->len[static_cast<size_t>(id)]};
}

int32_t Gpt2Tokenizer::rank_of(std::string_view bytes) const {
  const uint32_t r = impl_->rank(bytes);
  return r == kNone ? -1 : static_cast<int32_t>(r);
}

std::string Gpt2Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string s;
  for (int32_t id : ids) s += token_bytes(id);
  return s;
}

namespace {

// The ids of one pre-token with no rank of its own (at least two bytes):
// the byte pairs merged lowest rank first (leftmost among equals), as
// tiktoken's byte_pair_merge. parts[k] = (start of part k, rank of part k
// joined with part k+1); kNone where that is no token.
void merge_piece(const Gpt2Tokenizer::Impl& m, std::string_view piece,
                 std::vector<std::pair<uint32_t, uint32_t>>& parts, std::vector<int32_t>& out) {
  parts.clear();
  for (uint32_t i = 0; i <= piece.size(); ++i) parts.emplace_back(i, kNone);
  const auto pair_rank = [&](size_t k) {
    return k + 2 < parts.size() ? m.rank(piece.substr(parts[k].first, parts[k + 2].first - parts[k].first)) : kNone;
  };
  for (size_t k = 0; k + 1 < parts.size(); ++k) parts[k].second = pair_rank(k);
  for (;;) {
    uint32_t best = kNone;
    size_t at = 0;
    for (size_t k = 0; k + 1 < parts.size(); ++k)
      if (parts[k].second < best) {
        best = parts[k].second;
        at = k;
      }
    if (best == kNone) break;
    parts.erase(parts.begin() + static_cast<ptrdiff_t>(at) + 1);
    parts[at].second = pair_rank(at);
    if (at > 0) parts[at - 1].second = pair_rank(at - 1);
  }
  for (size_t k = 0; k + 1 < parts.size(); ++k)
    out.push_back(static_cast<int32_t>(m.rank(piece.substr(parts[k].first, parts[k + 1].first - parts[k].first))));
}

// A thread's PCRE2 match state, made once and kept (pattern-independent:
// the pattern has no groups, one ovector pair holds the match): a
// language model's corpus is thousands of short documents, one encode each.
struct MatchState {
  pcre2_match_data* md = nullptr;
  pcre2_match_context* mc = nullptr;
  pcre2_jit_stack* stack = nullptr;
  MatchState() {
    md = pcre2_match_data_create(1, nullptr);
    mc = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 8 << 20, nullptr);
    if (!md || !mc || !stack) throw std::bad_alloc();
    pcre2_jit_stack_assign(mc, nullptr, stack);
  }
  ~MatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(mc);
    pcre2_match_data_free(md);
  }
  MatchState(const MatchState&) = delete;
  MatchState& operator=(const MatchState&) = delete;
};

MatchState& match_state() {
  thread_local MatchState st;
  return st;
}

}  // namespace

std::vector<int32_t> Gpt2Tokenizer::encode(std::string_view text, const std::string& source) const {
  check_utf8(text, source);  // throws naming the line
  const Impl& m = *impl_;
  MatchState& st = match_state();
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 16);
  // Pre-tokens of more than one token, seen before in this text: where
  // their ids first went in `out` (offset, count).
  std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> seen;
  std::vector<std::pair<uint32_t, uint32_t>> parts;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    const int rc = m.jit ? pcre2_jit_match(m.re, subject, text.size(), pos, 0, st.md, st.mc)
                         : pcre2_match(m.re, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, st.md, st.mc);
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw std::runtime_error(source + ": GPT-2's pre-tokenizer failed at byte " + std::to_string(pos) + ": " +
                               reinterpret_cast<const char*>(msg));
    }
    const size_t end = pcre2_get_ovector_pointer(st.md)[1];
    if (end <= pos) throw std::logic_error("GPT-2's pattern matched nothing at byte " + std::to_string(pos));
    const std::string_view piece = text.substr(pos, end - pos);
    pos = end;
    if (const uint32_t r = m.rank(piece); r != kNone) {
      out.push_back(static_cast<int32_t>(r));
      continue;
    }
    if (auto it = seen.find(piece); it != seen.end()) {
      const auto [at, n] = it->second;
      for (uint32_t k = 0; k < n; ++k) {
        const int32_t id = out[at + k];
        out.push_back(id);
      }
      continue;
    }
    const size_t at = out.size();
    merge_piece(m, piece, parts, out);
    seen.emplace(piece, std::make_pair(static_cast<uint32_t>(at), static_cast<uint32_t>(out.size() - at)));
  }
  return out;
}

}  // namespace memfit::data
