// Labelled text for classification: JSONL, CSV (RFC 4180 quoting) and a
// folder per class, with errors that name the file and line; the seeded
// split; TokenizedTexts' tokens, attention mask, lengths and truncation;
// and `memfit train` of the LSTM classifier and a tiny BERT on such data.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_util.hpp"
#include "data/text_classes.hpp"

using namespace memfit;
using namespace memfit::data;
using namespace memfit::testing;
namespace fs = std::filesystem;

namespace {

std::string error_of_read(const std::string& path) {
  try {
    read_labelled(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(LabelledText, JsonlCsvAndFolders) {
  const std::string dir = temp_dir("labelled");
  std::ofstream(dir + "/a.jsonl") << "{\"text\": \"good film\", \"label\": \"pos\"}\n\n"
                                  << "{\"text\": \"caf\\u00e9 bad\", \"label\": \"neg\", \"id\": 7}\n"
                                  << "{\"label\": 2, \"text\": \"an integer label\"}\n";
  const LabelledTexts j = read_labelled(dir + "/a.jsonl");
  EXPECT_EQ(j.texts, (std::vector<std::string>{"good film", "caf\xC3\xA9 bad", "an integer label"}));
  EXPECT_EQ(j.labels, (std::vector<std::string>{"pos", "neg", "2"}));
  std::ofstream(dir + "/b.csv") << "id,Label,text\r\n1,pos,\"quoted, with a comma\"\r\n2,neg,\"two\nlines and \"\"quotes\"\"\"\n3,neg,plain\n";
  const LabelledTexts c = read_labelled(dir + "/b.csv");
  EXPECT_EQ(c.texts, (std::vector<std::string>{"quoted, with a comma", "two\nlines and \"quotes\"", "plain"}));
  EXPECT_EQ(c.labels, (std::vector<std::string>{"pos", "neg", "neg"}));
  fs::create_directories(dir + "/f/sports");
  fs::create_directories(dir + "/f/food");
  std::ofstream(dir + "/f/sports/1.txt") << "a goal";
  std::ofstream(dir + "/f/food/1.txt") << "bread";
  std::ofstream(dir + "/f/food/2.txt") << "soup";
  const LabelledTexts f = read_labelled(dir + "/f");
  EXPECT_EQ(f.labels, (std::vector<std::string>{"food", "food", "sports"}));
  EXPECT_EQ(class_names_of({&j, &c}), (std::vector<std::string>{"2", "neg", "pos"}));
  LabelledTexts nums;
  nums.labels = {"10", "2", "1"};
  EXPECT_EQ(class_names_of({&nums}), (std::vector<std::string>{"1", "2", "10"}));  // numeric order
}

TEST(LabelledText, BadRowsNameTheFileAndLine) {
  const std::string dir = temp_dir("labelled-bad");
  struct Case {
    std::string file, content, expect;
  };
  const Case cases[] = {
      {"a.jsonl", "{\"text\": \"ok\", \"label\": 1}\nnot json\n", "a.jsonl:2: not a JSON object"},
      {"b.jsonl", "{\"text\": \"ok\"}\n", "b.jsonl:1: no \"label\""},
      {"c.jsonl", "{\"text\": 5, \"label\": 1}\n", "c.jsonl:1: no \"text\" string"},
      {"d.jsonl", "{\"text\": \"x\", \"label\": 1.5}\n", "d.jsonl:1: the label must be a string or an integer"},
      {"e.jsonl", "{\"text\": \"  \", \"label\": 1}\n", "e.jsonl:1: the text is empty"},
      {"f.csv", "text,label\n\"open quote,1\n", "f.csv:2: a quoted field is not closed"},
      {"g.csv", "text,label\na,1\nb\n", "g.csv:3: 1 fields, the header has 2"},
      {"h.csv", "body,label\na,1\n", "h.csv:1: the header must name a \"text\" and a \"label\" column"},
      {"i.csv", "text,label\n\"caf\xC3(\",1\n", "i.csv:2"},
      {"j.txt", "x", "must be .jsonl or .csv"},
  };
  for (const Case& c : cases) {
    std::ofstream(dir + "/" + c.file) << c.content;
    const std::string e = error_of_read(dir + "/" + c.file);
    EXPECT_NE(e.find(c.expect), std::string::npos) << c.file << ": " << e;
  }
  EXPECT_NE(error_of_read(dir + "/missing.jsonl").find("no such file"), std::string::npos);
  std::ofstream(dir + "/empty.jsonl") << "\n";
  EXPECT_NE(error_of_read(dir + "/empty.jsonl").find("no examples"), std::string::npos);
}

// AG News as torchtext downloads it: train.csv/test.csv without a header,
// "label","title","description" with labels 1..4 (World, Sports, Business,
// Sci/Tech). --csv-columns label,text,text reads it: title and description
// joined with a space (as torchtext's AG_NEWS yields them); the integer
// labels are class names in numeric order, so 1..4 are classes 0..3.
TEST(LabelledText, HeaderlessCsvColumns) {
  const std::string dir = temp_dir("labelled-columns");
  std::ofstream(dir + "/ag.csv") << "\"3\",\"Wall St. Bears Claw Back\",\"Reuters - Short-sellers, \"\"ultra-cynics\"\"\"\n"
                                 << "\"4\",\"Title only\",\"\"\r\n"
                                 << "\"1\",\"\",\"Description only\"\n"
                                 << "\"2\",\"Two\nlines\",\"ok\"\n";
  const CsvColumns cols = parse_csv_columns("label,text,text");
  ASSERT_EQ(cols.roles.size(), 3u);
  const LabelledTexts t = read_labelled(dir + "/ag.csv", cols);
  EXPECT_EQ(t.texts, (std::vector<std::string>{"Wall St. Bears Claw Back Reuters - Short-sellers, \"ultra-cynics\"",
                                               "Title only", "Description only", "Two\nlines ok"}));
  EXPECT_EQ(t.labels, (std::vector<std::string>{"3", "4", "1", "2"}));
  EXPECT_EQ(class_names_of({&t}), (std::vector<std::string>{"1", "2", "3", "4"}));
  // Roles in any order; "-" skips a column.
  std::ofstream(dir + "/skip.csv") << "x,pos,good\ny,neg,bad\n";
  const LabelledTexts u = read_labelled(dir + "/skip.csv", parse_csv_columns("-,LABEL,Text"));
  EXPECT_EQ(u.texts, (std::vector<std::string>{"good", "bad"}));
  EXPECT_EQ(u.labels, (std::vector<std::string>{"pos", "neg"}));
  // The flag's slips, named.
  for (const char* bad : {"text,text", "label,label,text", "label", "label,body", "label,,text"})
    EXPECT_THROW(parse_csv_columns(bad), std::invalid_argument) << bad;
  EXPECT_NE(std::string([&] {
              try {
                parse_csv_columns("label,body");
              } catch (const std::invalid_argument& e) {
                return std::string(e.what());
              }
              return std::string();
            }())
                .find("'body' is not a column role"),
            std::string::npos);
  EXPECT_TRUE(parse_csv_columns("").empty());
  // A row of another width, a header where none is expected, a non-CSV source.
  std::ofstream(dir + "/short.csv") << "1,a,b\n2,c\n";
  auto err = [&](const std::string& path, const CsvColumns& c) {
    try {
      read_labelled(path, c);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(err(dir + "/short.csv", cols).find("short.csv:2: 2 fields, --csv-columns names 3"), std::string::npos);
  std::ofstream(dir + "/header.csv") << "label,title,description\n1,a,b\n";
  EXPECT_NE(err(dir + "/header.csv", cols).find("header.csv:1: the first row looks like a header"), std::string::npos);
  std::ofstream(dir + "/x.jsonl") << "{\"text\": \"a\", \"label\": 1}\n";
  EXPECT_NE(err(dir + "/x.jsonl", cols).find("--csv-columns describes CSV files"), std::string::npos);
}

// A folder of AG News-style train.csv and test.csv trains through the
// command with --csv-columns; without it, the first row is taken as a
// header and refused.
TEST(TextClassify, HeaderlessCsvTrainsWithCsvColumns) {
  const std::string dir = temp_dir("agnews");
  const char* words[4][3] = {{"election", "minister", "treaty"},
                             {"goal", "match", "coach"},
                             {"shares", "profit", "market"},
                             {"software", "chip", "space"}};
  for (const char* part : {"train", "test"}) {
    std::ofstream f(dir + "/" + std::string(part) + ".csv");
    for (int i = 0; i < (part[1] == 'r' ? 64 : 16); ++i) {
      const int c = i % 4;
      f << "\"" << c + 1 << "\",\"" << words[c][i % 3] << " news\",\"about the " << words[c][(i + 1) % 3] << "\"\n";
    }
  }
  const RunResult r = run_memfit("train --model lstm-classifier --data " + dir + " --csv-columns label,text,text "
                                 "--steps 3 --batch 16 --threads 2 --progress lines --json --out " + dir + "/run");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("64 + 16 examples, 4 classes"), std::string::npos) << r.out;
  EXPECT_TRUE(std::isfinite(json_number(r.out, "final_train_loss"))) << r.out;
  const RunResult no_flag = run_memfit("train --model lstm-classifier --data " + dir + " --steps 1 --out " + dir + "/x");
  EXPECT_NE(no_flag.code, 0);
  EXPECT_NE(no_flag.out.find("train.csv:1: the header must name"), std::string::npos) << no_flag.out;
  const RunResult slip = run_memfit("train --model lstm-classifier --data " + dir + " --csv-columns label,txt --steps 1 --out " + dir + "/x");
  EXPECT_EQ(slip.code, 2) << slip.out;
  EXPECT_NE(slip.out.find("--csv-columns 'label,txt': 'txt' is not a column role"), std::string::npos) << slip.out;
}

TEST(LabelledText, SeededSplitKeepsEveryExampleOnce) {
  LabelledTexts all;
  for (int i = 0; i < 500; ++i) {
    all.texts.push_back("t" + std::to_string(i));
    all.labels.push_back(i % 2 ? "a" : "b");
  }
  const LabelledSplit a = split_labelled(all, 0.2, 3), b = split_labelled(all, 0.2, 3);
  EXPECT_EQ(a.held_out.texts, b.held_out.texts);
  EXPECT_EQ(a.train.size() + a.held_out.size(), 500u);
  EXPECT_GT(a.held_out.size(), 70u);
  EXPECT_LT(a.held_out.size(), 130u);
  EXPECT_THROW(split_labelled(all, 1.0, 3), std::invalid_argument);
}

TEST(TokenizedTexts, PaddingMaskLengthsAndTruncation) {
  const TokenizedTexts ds({{5, 6, 7}, {1, 2, 3, 4, 5, 6}}, {1, 0}, 4, 10, {"neg", "pos"}, 0);
  ASSERT_EQ(ds.tensors().size(), 4u);
  EXPECT_EQ(ds.tensors()[0].name, "tokens");
  EXPECT_EQ(ds.tensors()[0].range, 10);
  EXPECT_EQ(ds.num_classes(), 2);
  EXPECT_EQ(ds.truncated(), 1u);
  std::vector<int32_t> tok(4), mask(4);
  int32_t len = -1, label = -1;
  void* out[4] = {tok.data(), mask.data(), &len, &label};
  ds.get_tensors(0, out);
  EXPECT_EQ(tok, (std::vector<int32_t>{5, 6, 7, 0}));
  EXPECT_EQ(mask, (std::vector<int32_t>{1, 1, 1, 0}));
  EXPECT_EQ(len, 3);
  EXPECT_EQ(label, 1);
  ds.get_tensors(1, out);
  EXPECT_EQ(tok, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(mask, (std::vector<int32_t>{1, 1, 1, 1}));
  EXPECT_EQ(len, 4);
  EXPECT_THROW(TokenizedTexts({{}}, {0}, 4, 10, {"a", "b"}, 0), std::invalid_argument);     // no tokens
  EXPECT_THROW(TokenizedTexts({{11}}, {0}, 4, 10, {"a", "b"}, 0), std::invalid_argument);   // outside the vocabulary
  EXPECT_THROW(TokenizedTexts({{1}}, {2}, 4, 10, {"a", "b"}, 0), std::invalid_argument);    // no such class
}

// Two classes a model can only tell apart by reading the text: sentences of
// the same letters, where one class has "x" somewhere and the other not.
TEST(TextClassify, LstmAndBertTrainFromTheCommandLine) {
  const std::string dir = temp_dir("text-classify");
  uint64_t s = 99;
  auto next = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return s >> 33;
  };
  for (const char* part : {"train", "test"}) {
    std::ofstream f(dir + "/" + std::string(part) + ".jsonl");
    for (int i = 0; i < (part[1] == 'r' ? 600 : 200); ++i) {
      const bool x = next() % 2;
      std::string t;
      for (int k = 0; k < 12; ++k) t += "abcdefg "[next() % 8];
      if (x) t[next() % 12] = 'x';
      f << "{\"text\": \"" << t << "\", \"label\": \"" << (x ? "with-x" : "without") << "\"}\n";
    }
  }
  const RunResult lstm = run_memfit("train --model lstm-classifier --data " + dir + " --optimizer adam --lr 3e-3 --epochs 6 "
                                    "--batch 32 --threads 2 --progress lines --json --out " + dir + "/lstm");
  ASSERT_EQ(lstm.code, 0) << lstm.out;
  EXPECT_NE(lstm.out.find("600 + 200 examples, 2 classes, 12 tokens each"), std::string::npos) << lstm.out;
  EXPECT_GT(json_number(lstm.out, "test_accuracy"), 0.9) << lstm.out;
  EXPECT_TRUE(fs::exists(dir + "/lstm/tokenizer.json"));
  const RunResult bert = run_memfit("train --model bert-tiny --data " + dir + " --optimizer adamw --lr 2e-3 --epochs 6 "
                                    "--batch 32 --max-len 16 --threads 2 --progress lines --json --out " + dir + "/bert");
  ASSERT_EQ(bert.code, 0) << bert.out;
  EXPECT_NE(bert.out.find("16 tokens each"), std::string::npos) << bert.out;
  EXPECT_GT(json_number(bert.out, "test_accuracy"), 0.9) << bert.out;
  // A model's limit is a clear error.
  const RunResult longer = run_memfit("train --model bert-tiny --data " + dir + " --max-len 100 --steps 1 --out " + dir + "/x");
  EXPECT_NE(longer.code, 0);
  EXPECT_NE(longer.out.find("--max-len 100 is longer than model 'bert-tiny' takes (64 tokens)"), std::string::npos) << longer.out;
}

// The real pretrained encoder fine-tuned from the command line: all-MiniLM-
// L6-v2's weights (make deps installs them) under a new head, its own
// WordPiece vocabulary framing each text as [CLS] text [SEP], the embeddings
// frozen. Three steps: this checks the path, not the accuracy.
TEST(TextClassify, MiniLmFineTunesWithItsWordPieceVocabulary) {
  const std::string m = MEMFIT_MINILM_DIR;
  if (!fs::exists(m + "/model.safetensors")) GTEST_SKIP() << "all-MiniLM-L6-v2 is not at " << m << ": make deps installs it";
  const std::string dir = temp_dir("minilm-classify");
  {
    std::ofstream f(dir + "/all.jsonl");
    const char* texts[2][3] = {{"the team won the match", "a late goal in the final", "the runner broke the record"},
                               {"bake the bread for an hour", "a soup of lentils and onions", "fresh pasta with basil"}};
    for (int i = 0; i < 60; ++i)
      f << "{\"text\": \"" << texts[i % 2][i / 2 % 3] << "\", \"label\": \"" << (i % 2 ? "food" : "sports") << "\"}\n";
  }
  // The folder brings both the weights and the vocabulary.
  const RunResult r = run_memfit("train --model minilm --init-from " + m + " --reinit classifier "
                                 "--data " + dir + "/all.jsonl --freeze embeddings "
                                 "--optimizer adamw --lr 1e-4 --batch 8 --steps 3 --threads 2 --progress lines --json --out " +
                                 dir + "/run");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("initialised 101 tensors from"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("wordpiece tokens (vocabulary 30522)"), std::string::npos) << r.out;
  // The longest texts are 7 WordPiece tokens ("bake" is "ba ##ke", "lentils"
  // "lent ##ils"); with [CLS] and [SEP], 9.
  EXPECT_NE(r.out.find("2 classes, 9 tokens each"), std::string::npos) << r.out;
  EXPECT_TRUE(std::isfinite(json_number(r.out, "final_train_loss"))) << r.out;
}
