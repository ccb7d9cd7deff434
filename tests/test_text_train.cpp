// `memfit train` on text: a language model trains on a text corpus from
// the command line, with its tokenizer saved in the run directory, val loss
// on held-out documents, tokens/s in the progress, and an exact resume;
// bad text options are clear errors; the token cache is reused exactly and
// rebuilt when wrong; --task is checked against the model. The corpus is
// written here (fortune format: entries between "%" lines), so the test
// needs no package.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cli_util.hpp"
#include "data/text.hpp"
#include "data/tokenizer.hpp"
#include "same_tensors.hpp"

using namespace memfit::testing;
namespace fs = std::filesystem;

namespace {

// 600 short entries of words in a fixed pseudo-random order: enough
// structure (spelling, spaces, punctuation) for a small model to learn.
std::string write_corpus(const std::string& dir) {
  const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "hill", "with", "red", "ball"};
  uint64_t x = 12345;
  std::ostringstream s;
  for (int e = 0; e < 600; ++e) {
    const int n = 4 + e % 7;
    for (int w = 0; w < n; ++w) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      s << (w ? " " : "") << words[(x >> 33) % 14];
    }
    s << ".\n%\n";
  }
  const std::string path = dir + "/corpus";
  std::ofstream(path) << s.str();
  return path;
}

const std::string kArgs = " --model gpt-tiny --block-size 32 --batch 8 --optimizer adamw --lr 3e-3 --schedule constant"
                          " --threads 2 --seed 5 --progress lines";

}  // namespace

TEST(TextTrain, LanguageModelLearnsSavesItsTokenizerAndReportsValLoss) {
  const std::string dir = temp_dir("text-train");
  const std::string corpus = write_corpus(dir);
  const RunResult r =
      run_memfit("train" + kArgs + " --data " + corpus + " --steps 40 --eval-every 20 --out " + dir + "/run --json");
  ASSERT_EQ(r.code, 0) << r.out;
  // The plan names the text it read.
  EXPECT_NE(r.out.find("text in memory (1 file, 600 documents ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tok/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("eval step 20: val_loss "), std::string::npos) << r.out;
  // The alphabet: 14 words' letters, space, '.', '\n' (the entry separator is
  // a blank line).
  const memfit::data::CharTokenizer tok = memfit::data::CharTokenizer::load(dir + "/run/tokenizer.json");
  const double chance = std::log(static_cast<double>(tok.vocab_size()));
  EXPECT_EQ(tok.decode(tok.encode("the cat sat.\n", "x")), "the cat sat.\n");
  const double train_loss = json_number(r.out, "final_train_loss"), val_loss = json_number(r.out, "test_loss");
  // From chance (ln V, ~2.9) to below 2.0 in 40 steps: the model learned the
  // words; an untrained or mis-fed one stays near chance.
  EXPECT_LT(train_loss, 2.0) << r.out;
  EXPECT_LT(val_loss, 2.0) << r.out;
  EXPECT_GT(chance, 2.7);
  EXPECT_GT(json_number(r.out, "tokens_per_second"), 0.0);
  // metrics.jsonl has the perplexity of each evaluation.
  std::ifstream m(dir + "/run/metrics.jsonl");
  std::string line;
  int evals = 0;
  while (std::getline(m, line)) evals += line.find("\"test_perplexity\"") != std::string::npos;
  EXPECT_EQ(evals, 2);

  // memfit generate samples from the run: its plan first (stderr), then
  // 30 tokens that are the same for the same seed.
  const std::string gen = "generate --run " + dir + "/run --prompt 'the ' --tokens 30 --threads 2 --json";
  const RunResult g1 = run_memfit(gen + " --seed 1"), g2 = run_memfit(gen + " --seed 1"), g3 = run_memfit(gen + " --seed 2");
  ASSERT_EQ(g1.code, 0) << g1.out;
  EXPECT_NE(g1.out.find("memfit plan: gpt-tiny (generate), batch 1"), std::string::npos) << g1.out;
  const std::string text = json_at(g1.out, "text").get<std::string>();
  EXPECT_EQ(tok.encode(text, "generated").size(), 30u);  // every character in the alphabet
  EXPECT_EQ(text, json_at(g2.out, "text").get<std::string>());
  EXPECT_NE(text, json_at(g3.out, "text").get<std::string>());
  const RunResult none = run_memfit("generate --run " + dir + "/missing");
  EXPECT_NE(none.code, 0);
  EXPECT_NE(none.out.find("holds no trained run"), std::string::npos) << none.out;
}

TEST(TextTrain, ResumeContinuesExactlyWithTheSavedTokenizer) {
  const std::string dir = temp_dir("text-resume");
  const std::string corpus = write_corpus(dir);
  const RunResult whole = run_memfit("train" + kArgs + " --data " + corpus + " --steps 12 --eval-every 0 --out " + dir + "/a");
  ASSERT_EQ(whole.code, 0) << whole.out;
  const RunResult first = run_memfit("train" + kArgs + " --data " + corpus + " --steps 6 --eval-every 0 --out " + dir + "/b");
  ASSERT_EQ(first.code, 0) << first.out;
  // --data and --block-size come from the checkpoint.
  const RunResult rest = run_memfit("train --model gpt-tiny --batch 8 --optimizer adamw --lr 3e-3 --schedule constant "
                                    "--threads 2 --seed 5 --progress lines --steps 12 --eval-every 0 --resume " + dir + "/b");
  ASSERT_EQ(rest.code, 0) << rest.out;
  EXPECT_NE(rest.out.find("resuming with the checkpoint's data options: --data " + corpus), std::string::npos) << rest.out;
  EXPECT_NE(rest.out.find("--block-size 32"), std::string::npos) << rest.out;
  expect_same_tensors(dir + "/a/model.safetensors", dir + "/b/model.safetensors");
  expect_same_tensors(dir + "/a/checkpoint.safetensors", dir + "/b/checkpoint.safetensors");
}

// --precision bf16 / fp16 on a model of token ids: the embedding sum is
// cast into the activation type, and every activation after it is stored
// that way (logits back to f32 for the loss). 40 steps from the same seed
// end within 3% of the fp32 run's loss: each stored activation is rounded
// to 8 (bf16) or 11 (fp16) significant bits, which moves a mean over 256
// tokens by far less (here ~0.1%), while a broken path stays near chance
// (ln V ~ 2.9 against < 2.0 learned: over 40% away). At gpt-char's size
// (batch 4) the plan is smaller than fp32's, by at least a quarter of the
// activations' bytes (half of them, less the f32 shadows the conversions
// hold for one node at a time).
TEST(TextTrain, LowPrecisionActivationsTrainLikeFp32) {
  const std::string dir = temp_dir("text-bf16");
  const std::string corpus = write_corpus(dir);
  auto run = [&](const std::string& precision) {
    const RunResult r = run_memfit("train" + kArgs + " --data " + corpus + " --steps 40 --eval-every 0 --precision " +
                                   precision + " --out " + dir + "/" + precision + " --json");
    EXPECT_EQ(r.code, 0) << r.out;
    return r;
  };
  const RunResult f32 = run("fp32"), bf16 = run("bf16"), f16 = run("fp16");
  const double want = json_number(f32.out, "final_train_loss");
  EXPECT_LT(want, 2.0) << f32.out;
  for (const RunResult* r : {&bf16, &f16})
    EXPECT_NEAR(json_number(r->out, "final_train_loss"), want, 0.03 * want) << r->out;
  auto plan = [](const std::string& precision) {
    const RunResult r = run_memfit("plan --model gpt-char --batch 4 --json --precision " + precision);
    EXPECT_EQ(r.code, 0) << r.out;
    return json_at(r.out, "by_class");
  };
  const auto p32 = plan("fp32"), p16 = plan("bf16");
  const double a32 = p32.at("activations_arena").get<double>(), a16 = p16.at("activations_arena").get<double>();
  EXPECT_LT(a16, 0.75 * a32) << p16.dump() << "\n" << p32.dump();
}

TEST(TextTrain, BadTextOptionsAreClearErrors) {
  const std::string dir = temp_dir("text-bad");
  const std::string corpus = write_corpus(dir);
  struct Case {
    std::string args, expect;
  };
  const Case cases[] = {
      {" --data " + corpus + " --block-size 100", "--block-size 100 is longer than model 'gpt-tiny' takes (64 tokens)"},
      {" --data " + dir + "/missing.txt", "no text at " + dir + "/missing.txt"},
      {" --data " + corpus + " --val-fraction 1", "--val-fraction expects a fraction in [0, 1)"},
      {" --data " + corpus + " --tokenizer bpe", "--tokenizer expects char"},
      {" --data " + corpus + " --block-size 32 --subset 2", "the dataset has 2 samples, not one full batch of 8"},
  };
  for (const Case& c : cases) {
    const RunResult r = run_memfit("train --model gpt-tiny --batch 8 --steps 1 --out " + dir + "/run" + c.args);
    EXPECT_NE(r.code, 0) << c.args;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.args << "\n" << r.out;
  }
  // A text the other tokenizer cannot read on resume: a character outside
  // the saved alphabet names the file and line.
  ASSERT_EQ(run_memfit("train --model gpt-tiny --block-size 32 --batch 8 --steps 2 --eval-every 0 --threads 2 --data " + corpus +
                       " --out " + dir + "/r").code, 0);
  std::ofstream(dir + "/other.txt") << "the cat\nsat on the zebra\n";
  const RunResult r = run_memfit("train --model gpt-tiny --batch 8 --steps 4 --threads 2 --data " + dir +
                                 "/other.txt --block-size 4 --resume " + dir + "/r --out " + dir + "/r2");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("it was trained with --data " + corpus), std::string::npos) << r.out;
}

// GPT-2's BPE as the tokenizer: the vocabulary follows it (50257), each
// document ends with <|endoftext|>, and generation decodes its byte tokens.
TEST(TextTrain, Gpt2TokenizerTrainsAndGenerates) {
  if (!fs::exists(std::string(MEMFIT_TEST_DATA) + "/../deps/gpt2/gpt2.tiktoken"))
    GTEST_SKIP() << "deps/gpt2/gpt2.tiktoken is missing: make deps installs it";
  const std::string dir = temp_dir("text-gpt2");
  const std::string corpus = write_corpus(dir);
  const RunResult r = run_memfit("train --model gpt-tiny --tokenizer gpt2 --block-size 16 --batch 8 --optimizer adamw "
                                 "--lr 1e-2 --steps 60 --eval-every 0 --threads 2 --progress lines --json --data " +
                                 corpus + " --out " + dir + "/run");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("gpt2 tokens (vocabulary 50257)"), std::string::npos) << r.out;
  // Each entry ("the cat sat.") is its words, the period and <|endoftext|>:
  // some 20 distinct tokens of 50257, so the loss leaves chance (10.8) fast.
  EXPECT_LT(json_number(r.out, "final_train_loss"), std::log(50257.0) - 3.0) << r.out;
  const RunResult g = run_memfit("generate --run " + dir + "/run --prompt 'the' --tokens 8 --seed 3 --threads 2 --json");
  ASSERT_EQ(g.code, 0) << g.out;
  EXPECT_FALSE(json_at(g.out, "text").get<std::string>().empty()) << g.out;
}

namespace {

// The text after `marker` in `out`, up to the end of its line or a space.
std::string word_after(const std::string& out, const std::string& marker) {
  const size_t at = out.find(marker);
  if (at == std::string::npos) return "";
  const size_t from = at + marker.size();
  return out.substr(from, out.find_first_of(" \n", from) - from);
}

// The line holding `what` ("" when none).
std::string line_with(const std::string& out, const std::string& what) {
  const size_t at = out.find(what);
  if (at == std::string::npos) return "";
  const size_t from = out.rfind('\n', at) == std::string::npos ? 0 : out.rfind('\n', at) + 1;
  return out.substr(from, out.find('\n', at) - from);
}

}  // namespace

// The token cache: the first run tokenizes and writes it, the second reads
// it and trains bit-identically; a corrupt or truncated cache is rebuilt
// with the reason said; an edited corpus gets a new cache; a cache
// directory that cannot be written is a warning, and the run trains from
// memory.
TEST(TextTrain, TokenCacheIsReusedExactlyAndRebuiltWhenWrong) {
  const std::string dir = temp_dir("text-cache");
  const std::string corpus = write_corpus(dir);
  const std::string cache_dir = dir + "/cache";
  const std::string args = "train" + kArgs + " --data " + corpus + " --steps 3 --eval-every 0 --json --cache-dir ";
  auto train = [&](const std::string& out, const std::string& cdir = "") {
    return run_memfit(args + (cdir.empty() ? cache_dir : cdir) + " --out " + dir + "/" + out);
  };

  const RunResult built = train("a");
  ASSERT_EQ(built.code, 0) << built.out;
  EXPECT_NE(built.out.find("memfit: tokenized " + corpus + " ("), std::string::npos) << built.out;
  const std::string cache = word_after(built.out, " -> cache ");
  ASSERT_FALSE(cache.empty()) << built.out;
  EXPECT_EQ(fs::path(cache).parent_path(), fs::path(cache_dir)) << cache;
  ASSERT_TRUE(fs::exists(cache));
  const double loss = json_number(built.out, "final_train_loss");
  ASSERT_TRUE(std::isfinite(loss)) << built.out;
  const std::string pipeline = line_with(built.out, "data pipeline");
  EXPECT_NE(pipeline.find("1 file, 600 documents ("), std::string::npos) << built.out;

  const RunResult hit = train("b");
  ASSERT_EQ(hit.code, 0) << hit.out;
  EXPECT_NE(hit.out.find("memfit: tokens: cache hit " + cache + "\n"), std::string::npos) << hit.out;
  EXPECT_EQ(hit.out.find("memfit: tokenized"), std::string::npos) << hit.out;
  EXPECT_EQ(json_number(hit.out, "final_train_loss"), loss);
  expect_same_tensors(dir + "/a/model.safetensors", dir + "/b/model.safetensors");
  // The same text note and the same data-pipeline bytes in the plan.
  EXPECT_EQ(line_with(hit.out, "data pipeline"), pipeline);
  // The plan's JSON names the token cache as the data's file (memfit plan
  // splits with the default seed: a cache of its own, in the same folder).
  const RunResult plan = run_memfit("plan --model gpt-tiny --block-size 32 --batch 8 --optimizer adamw --data " + corpus +
                                    " --json --cache-dir " + cache_dir);
  ASSERT_EQ(plan.code, 0) << plan.out;
  const std::string planned = word_after(plan.out, " -> cache ");
  ASSERT_FALSE(planned.empty()) << plan.out;
  EXPECT_EQ(fs::path(planned).parent_path(), fs::path(cache_dir)) << planned;
  EXPECT_NE(plan.out.find("\"data_cache\":\"" + planned + "\""), std::string::npos) << plan.out;

  // One byte of the payload flipped: rebuilt, with the reason.
  {
    std::fstream f(cache, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-5, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    f.seekp(-5, std::ios::end);
    c = static_cast<char>(c ^ 0x5a);
    f.write(&c, 1);
  }
  const RunResult corrupt = train("c");
  ASSERT_EQ(corrupt.code, 0) << corrupt.out;
  EXPECT_NE(corrupt.out.find("-> cache " + cache + " (the old cache was unusable: its checksum does not match"),
            std::string::npos)
      << corrupt.out;
  EXPECT_EQ(json_number(corrupt.out, "final_train_loss"), loss);
  EXPECT_NE(train("c2").out.find("tokens: cache hit " + cache), std::string::npos);  // the rebuilt one is good

  // Truncated: rebuilt, saying so.
  fs::resize_file(cache, fs::file_size(cache) - 8);
  const RunResult cut = train("d");
  ASSERT_EQ(cut.code, 0) << cut.out;
  EXPECT_NE(cut.out.find("not what its header declares"), std::string::npos) << cut.out;

  // The corpus edited: its key changes, the tokens are made again.
  std::ofstream(corpus, std::ios::app) << "a new entry about the dog.\n%\n";
  const RunResult edited = train("e");
  ASSERT_EQ(edited.code, 0) << edited.out;
  EXPECT_NE(edited.out.find("memfit: tokenized " + corpus + " ("), std::string::npos) << edited.out;
  EXPECT_EQ(edited.out.find("cache hit"), std::string::npos) << edited.out;
  EXPECT_NE(word_after(edited.out, " -> cache "), cache) << edited.out;
  EXPECT_NE(line_with(edited.out, "data pipeline").find("601 documents"), std::string::npos) << edited.out;
  // The cache of the corpus before the edit is stale: deleted, saying so.
  EXPECT_NE(edited.out.find("memfit: deleted the stale token cache " + cache + " "), std::string::npos) << edited.out;
  EXPECT_FALSE(fs::exists(cache));
  const std::string edited_cache = word_after(edited.out, " -> cache ");

  // Another tokenizer spec or split: another key, not this cache.
  const RunResult split = run_memfit(args + cache_dir + " --val-fraction 0.2 --out " + dir + "/f");
  ASSERT_EQ(split.code, 0) << split.out;
  EXPECT_EQ(split.out.find("cache hit"), std::string::npos) << split.out;
  EXPECT_EQ(split.out.find("deleted the stale"), std::string::npos) << split.out;  // another slot: both kept
  EXPECT_TRUE(fs::exists(edited_cache)) << edited_cache;

  // A cache directory that cannot be made (under a regular file): a
  // warning, and training goes on from memory with the same tokens.
  const RunResult ro = train("g", dir + "/a/model.safetensors/cache");
  ASSERT_EQ(ro.code, 0) << ro.out;
  EXPECT_NE(ro.out.find("memfit: warning: tokenized " + corpus + " but could not write the token cache ("),
            std::string::npos)
      << ro.out;
  EXPECT_NE(ro.out.find("training goes on from memory"), std::string::npos) << ro.out;
}

// --task says what the run trains; one that does not fit the model is a
// usage error naming both.
TEST(TextTrain, TaskMustFitTheModel) {
  const std::string dir = temp_dir("text-task");
  const std::string corpus = write_corpus(dir);
  struct Case {
    std::string args, expect;
  };
  const Case cases[] = {
      {"--model gpt-char --task classify", "--task classify does not fit --model gpt-char: it is a language model"},
      {"--model lstm-classifier --task lm", "--task lm does not fit --model lstm-classifier: it is a classifier"},
      {"--model bert-tiny --task lm", "--task lm does not fit --model bert-tiny: it is a classifier"},
      {"--model gpt-tiny --task translate", "--task expects lm or classify, got 'translate'"},
  };
  for (const Case& c : cases) {
    for (const char* cmd : {"train", "plan"}) {
      const std::string out = std::string(cmd) == "train" ? " --out " + dir + "/run" : "";
      const RunResult r = run_memfit(std::string(cmd) + " " + c.args + " --data " + corpus + out);
      EXPECT_EQ(r.code, 2) << cmd << " " << c.args << "\n" << r.out;
      EXPECT_NE(r.out.find(c.expect), std::string::npos) << cmd << " " << c.args << "\n" << r.out;
    }
  }
  // The task the model is: accepted.
  const RunResult lm = run_memfit("train" + kArgs + " --task lm --data " + corpus + " --steps 1 --eval-every 0 --out " +
                                  dir + "/lm");
  EXPECT_EQ(lm.code, 0) << lm.out;
}
