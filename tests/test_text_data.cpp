// Text data for language modelling: UTF-8 decoding and its errors, the char
// tokenizer (round trip, unknown characters, its saved file), fortune
// entries, the seeded held-out split, and TokenWindows through the loader
// (next-token targets, exact resume); the token cache's key and file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "data/loader.hpp"
#include "data/text.hpp"
#include "data/token_cache.hpp"
#include "data/tokenizer.hpp"

using namespace memfit;
using namespace memfit::data;

namespace {

std::string error_of_decode(const std::string& s) {
  try {
    decode_utf8(s, "corpus.txt");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

std::string tmp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("memfit-text-" + std::to_string(::getpid()) + "-" + name)).string();
}

}  // namespace

TEST(Utf8, DecodesAndReEncodesEveryLength) {
  const std::string s = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z";  // a é € 😀 z
  const auto cps = decode_utf8(s, "x");
  EXPECT_EQ(cps, (std::vector<char32_t>{U'a', 0xE9, 0x20AC, 0x1F600, U'z'}));
  EXPECT_EQ(encode_utf8(std::u32string(cps.begin(), cps.end())), s);
}

TEST(Utf8, InvalidSequencesNameTheLineAndByte) {
  EXPECT_NE(error_of_decode("ok\nok\n\x80").find("corpus.txt:3 (byte 6)"), std::string::npos) << error_of_decode("ok\nok\n\x80");
  EXPECT_NE(error_of_decode("\xC3").find("truncated"), std::string::npos);
  EXPECT_NE(error_of_decode("\xC3(").find("cut short"), std::string::npos);
  EXPECT_NE(error_of_decode("\xC0\xAF").find("overlong"), std::string::npos);
  EXPECT_NE(error_of_decode("\xED\xA0\x80").find("not a Unicode scalar"), std::string::npos);  // a surrogate
  EXPECT_NE(error_of_decode("\xF4\x90\x80\x80").find("not a Unicode scalar"), std::string::npos);  // > U+10FFFF
}

TEST(CharTokenizer, AlphabetRoundTripAndUnknownCharacters) {
  const std::string text = "hello, world\nh\xC3\xA9llo\n";
  const CharTokenizer t = CharTokenizer::from_text(text, "c.txt");
  EXPECT_EQ(t.vocab_size(), 11u);  // \n space , d e h l o r w é
  EXPECT_EQ(t.alphabet().front(), U'\n');
  const auto ids = t.encode(text, "c.txt");
  EXPECT_EQ(ids.size(), 19u);
  EXPECT_EQ(t.decode(ids), text);
  try {
    t.encode("hello\nzebra", "other.txt");
    FAIL() << "an unknown character was encoded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("other.txt:2: the character 'z' (U+007A)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.decode({0, 11}), std::out_of_range);
}

TEST(CharTokenizer, SavedFileLoadsTheSameIdsAndBadFilesAreRefused) {
  const CharTokenizer t = CharTokenizer::from_text("abc\xE2\x82\xAC", "c");
  const std::string p = tmp_path("tok.json");
  t.save(p);
  const CharTokenizer u = CharTokenizer::load(p);
  EXPECT_EQ(u.alphabet(), t.alphabet());
  EXPECT_EQ(u.encode("cab\xE2\x82\xAC", "x"), t.encode("cab\xE2\x82\xAC", "x"));
  for (const std::string bad : {"{", "{\"tokenizer\": \"bpe\", \"alphabet\": [97]}", "{\"tokenizer\": \"char\", \"alphabet\": [98, 97]}",
                                "{\"tokenizer\": \"char\", \"alphabet\": []}"}) {
    std::ofstream(p) << bad;
    EXPECT_THROW(CharTokenizer::load(p), std::runtime_error) << bad;
  }
  std::remove(p.c_str());
  EXPECT_THROW(CharTokenizer::load(p), std::runtime_error);
}

TEST(Fortunes, EntriesAndASeededSplit) {
  const auto e = split_fortunes("one\nline\n%\ntwo\n%\n%\r\nthree\n");
  EXPECT_EQ(e, (std::vector<std::string>{"one\nline", "two", "three"}));
  std::vector<std::string> many(1000);
  for (size_t i = 0; i < many.size(); ++i) many[i] = std::to_string(i);
  const EntrySplit a = split_entries(many, 0.1, 5), b = split_entries(many, 0.1, 5), c = split_entries(many, 0.1, 6);
  EXPECT_EQ(a.held_out, b.held_out);
  EXPECT_NE(a.held_out, c.held_out);
  EXPECT_EQ(a.train.size() + a.held_out.size(), many.size());
  EXPECT_GT(a.held_out.size(), 60u);
  EXPECT_LT(a.held_out.size(), 140u);
  EXPECT_TRUE(split_entries(many, 0.0, 5).held_out.empty());
  EXPECT_THROW(split_entries(many, 1.0, 5), std::invalid_argument);
  EXPECT_EQ(join_entries({"a", "b"}), "a\n\nb\n\n");
}

TEST(TokenWindows, NextTokenTargetsThroughTheLoaderAndExactResume) {
  auto tokens = std::make_shared<std::vector<int32_t>>(103);
  for (size_t i = 0; i < tokens->size(); ++i) (*tokens)[i] = static_cast<int32_t>(i % 50);
  const TokenWindows ds(tokens, 10, 50);
  EXPECT_EQ(ds.size(), 10u);  // (103 - 1) / 10
  ASSERT_EQ(ds.tensors().size(), 2u);
  EXPECT_EQ(ds.tensors()[0].range, 50);
  LoaderOptions o;
  o.batch_size = 3;
  o.seed = 9;
  o.drop_last = true;
  Loader a(ds, o);
  std::vector<std::vector<int32_t>> seen;
  for (int k = 0; k < 3; ++k) {
    const Loader::Batch& b = a.next_batch();
    ASSERT_EQ(b.n, 3u);
    const auto* tok = static_cast<const int32_t*>(b.data[0]);
    const auto* tgt = static_cast<const int32_t*>(b.data[1]);
    for (size_t r = 0; r < 3; ++r) {
      EXPECT_EQ(tok[r * 10] % 10, 0);  // a window starts at a multiple of the block (ids are i mod 50)
      for (size_t j = 0; j < 10; ++j) EXPECT_EQ(tgt[r * 10 + j], (tok[r * 10 + j] + 1) % 50);
    }
    seen.emplace_back(tok, tok + 30);
  }
  // Resume from after the first batch: the same two batches follow.
  Loader b(ds, o);
  b.seek({0, 3});
  for (int k = 1; k < 3; ++k) {
    const Loader::Batch& x = b.next_batch();
    const auto* tok = static_cast<const int32_t*>(x.data[0]);
    EXPECT_EQ(std::vector<int32_t>(tok, tok + 30), seen[static_cast<size_t>(k)]);
  }
  EXPECT_THROW(TokenWindows(tokens, 103, 50), std::invalid_argument);
  EXPECT_THROW(TokenWindows(tokens, 10, 40), std::invalid_argument);  // id 49 outside 40
}

TEST(TokenWindows, RandomWindowsAreFreshEachEpochInRangeAndReproducible) {
  auto tokens = std::make_shared<std::vector<int32_t>>(1000);
  std::iota(tokens->begin(), tokens->end(), 0);  // id == position: a window shows where it starts
  const TokenWindows ds(tokens, 16, 1000, /*random_seed=*/3), same(tokens, 16, 1000, 3), other(tokens, 16, 1000, 4);
  EXPECT_EQ(ds.size(), 62u);  // (1000 - 1) / 16: an epoch still reads about every token once
  std::vector<int32_t> tok(16), tgt(16);
  void* out[2] = {tok.data(), tgt.data()};
  size_t differ_epoch = 0, differ_seed = 0, unaligned = 0;
  std::vector<bool> covered(1000, false);
  for (uint64_t e = 0; e < 4; ++e)
    for (size_t i = 0; i < ds.size(); ++i) {
      const size_t s = ds.start_of(i, e);
      ASSERT_LE(s + 16, 999u);  // the last target is token N - 1 at most
      ds.get_tensors_at(i, e, out);
      for (size_t j = 0; j < 16; ++j) {
        ASSERT_EQ(tok[j], static_cast<int32_t>(s + j));
        ASSERT_EQ(tgt[j], static_cast<int32_t>(s + j + 1));
        covered[s + j] = true;
      }
      EXPECT_EQ(same.start_of(i, e), s);  // a pure function of (seed, epoch, i): resume is exact
      differ_epoch += ds.start_of(i, e + 1) != s;
      differ_seed += other.start_of(i, e) != s;
      unaligned += s % 16 != 0;
    }
  EXPECT_GT(differ_epoch, 200u);  // of 248: an epoch draws new windows
  EXPECT_GT(differ_seed, 200u);
  EXPECT_GT(unaligned, 200u);  // any offset, not the block grid
  EXPECT_GT(std::count(covered.begin(), covered.end(), true), 900);  // four epochs reach nearly every token
  // get_tensors is epoch 0's window.
  ds.get_tensors(5, out);
  EXPECT_EQ(tok[0], static_cast<int32_t>(ds.start_of(5, 0)));
  EXPECT_THROW(ds.start_of(62, 0), std::out_of_range);
}

TEST(Corpus, FortuneEntriesParagraphsBinaryFilesAndLinks) {
  namespace fs = std::filesystem;
  const fs::path dir = tmp_path("corpus");
  fs::remove_all(dir);
  fs::create_directories(dir / "sub");
  std::ofstream(dir / "b-fortunes") << "one\n%\ntwo\nlines\n%\n";
  std::ofstream(dir / "a-plain.txt") << "first para\nstill first\n\n  \nsecond\n";
  std::ofstream(dir / "c.dat", std::ios::binary) << std::string("\x01\x00\x02", 3);  // a binary index
  std::ofstream(dir / "sub" / "nested.txt") << "not read\n";                          // subfolders are not
  std::ofstream(dir / ".hidden") << "not read\n";
  fs::create_symlink(dir / "b-fortunes", dir / "b-fortunes.u8");  // a second name of a file already read
  const Corpus c = read_corpus(dir.string());
  EXPECT_EQ(c.documents, (std::vector<std::string>{"first para\nstill first", "second", "one", "two\nlines"}));
  EXPECT_EQ(c.files.size(), 2u);
  EXPECT_EQ(c.skipped, 2u);  // c.dat and the link
  // One file by name: its own documents; a binary one is refused by name.
  EXPECT_EQ(read_corpus((dir / "b-fortunes").string()).documents.size(), 2u);
  auto error_of_read = [](const fs::path& p) {
    try {
      read_corpus(p.string());
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of_read(dir / "c.dat").find("not a text file"), std::string::npos);
  EXPECT_NE(error_of_read(dir / "missing.txt").find("no such file"), std::string::npos);
  std::ofstream(dir / "d-bad.txt") << "fine\nbad \xC3(\n";
  const std::string bad = error_of_read(dir);
  EXPECT_NE(bad.find("d-bad.txt:2"), std::string::npos) << bad;  // not UTF-8: the file and line
  fs::remove_all(dir / "sub");
  fs::create_directories(dir / "empty");
  EXPECT_NE(error_of_read(dir / "empty").find("no text"), std::string::npos);
  fs::remove_all(dir);
}

// The token cache's key changes with everything that changes the tokens
// (a file's content, the directory's files, the tokenizer, the split), and
// a written cache reads back the same; a file that is short, corrupt or
// of another key is refused with a reason, never returned.
TEST(TokenCache, KeyFollowsTheCorpusTokenizerAndSplit) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("memfit-token-cache-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "corpus");
  std::ofstream(dir / "corpus" / "a.txt") << "one\n";
  const std::string corpus = (dir / "corpus").string();
  const TokenCacheKey k = token_cache_key(corpus, "char:corpus", 0.1, 7);
  EXPECT_EQ(k.name, "corpus");
  EXPECT_EQ(token_cache_key(corpus, "char:corpus", 0.1, 7).hash, k.hash);
  EXPECT_NE(token_cache_key(corpus, "gpt2:0123", 0.1, 7).hash, k.hash);
  EXPECT_NE(token_cache_key(corpus, "char:corpus", 0.2, 7).hash, k.hash);
  EXPECT_NE(token_cache_key(corpus, "char:corpus", 0.1, 8).hash, k.hash);
  std::ofstream(dir / "corpus" / "b.txt") << "two\n";
  const TokenCacheKey k2 = token_cache_key(corpus, "char:corpus", 0.1, 7);
  EXPECT_NE(k2.hash, k.hash);
  std::ofstream(dir / "corpus" / "b.txt", std::ios::app) << "three\n";
  EXPECT_NE(token_cache_key(corpus, "char:corpus", 0.1, 7).hash, k2.hash);
  EXPECT_THROW(token_cache_key((dir / "missing").string(), "char:corpus", 0.1, 7), std::runtime_error);

  const std::string path = token_cache_path(k, dir.string());
  EXPECT_EQ(fs::path(path).parent_path(), dir);
  std::string why;
  EXPECT_FALSE(read_token_cache(path, k, why));
  EXPECT_EQ(why, "");  // no file: nothing wrong, just absent
  TokenCacheData d;
  d.tokenizer = CharTokenizer::from_text("ab\n", "t").saved();
  d.train = std::make_shared<std::vector<int32_t>>(std::vector<int32_t>{0, 1, 2, 1, 0});
  d.held_out = std::make_shared<std::vector<int32_t>>(std::vector<int32_t>{2, 2});
  d.files = 1;
  d.documents = 3;
  d.held_out_documents = 1;
  write_token_cache(path, k, d);
  auto r = read_token_cache(path, k, why);
  ASSERT_TRUE(r) << why;
  EXPECT_EQ(*r->train, *d.train);
  EXPECT_EQ(*r->held_out, *d.held_out);
  EXPECT_EQ(r->tokenizer, d.tokenizer);
  EXPECT_EQ(parse_tokenizer(r->tokenizer, path)->vocab_size(), 3u);
  EXPECT_EQ(r->documents, 3u);
  EXPECT_EQ(r->held_out_documents, 1u);
  // No temporary file is left next to it.
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.is_regular_file();
  EXPECT_EQ(n, 1u);

  EXPECT_FALSE(read_token_cache(path, k2, why));
  EXPECT_NE(why.find("another corpus"), std::string::npos) << why;
  const auto size = fs::file_size(path);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  EXPECT_FALSE(read_token_cache(path, k, why));
  EXPECT_NE(why.find("checksum"), std::string::npos) << why;
  fs::resize_file(path, size - 3);
  EXPECT_FALSE(read_token_cache(path, k, why));
  EXPECT_NE(why.find("not what its header declares"), std::string::npos) << why;
  fs::resize_file(path, 10);
  EXPECT_FALSE(read_token_cache(path, k, why));
  EXPECT_NE(why.find("shorter than its header"), std::string::npos) << why;
  std::ofstream(path, std::ios::trunc) << std::string(200, 'x');
  EXPECT_FALSE(read_token_cache(path, k, why));
  EXPECT_NE(why.find("bad magic"), std::string::npos) << why;
  // A directory that cannot be made: an error naming it.
  EXPECT_THROW(write_token_cache((dir / "corpus" / "a.txt" / "sub" / "x.tokens").string(), k, d), std::runtime_error);
  fs::remove_all(dir);
}
