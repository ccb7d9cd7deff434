// Regressions of small slips in the command's behaviour:
//  - metrics.jsonl numbers each evaluation by the epoch it ended (1, 2, 3),
//  - --eval-every 0 evaluates nothing, not even at the end,
//  - bad --subset / --test-subset / --batch values exit 2 naming the flag,
//  - --dropout is checked and taken by ONNX models only,
//  - a linear layer on an unflattened feature map names the layer and says
//    to add flatten instead of blaming the implicit loss,
//  - --json keeps stdout to the one JSON object, even when the fit runs.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "cli_util.hpp"
#include "run_binary.hpp"

namespace {

const std::string kSmall = " --subset 256 --test-subset 64 --batch 64 --threads 2 --progress lines";

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> v;
  for (std::string l; std::getline(f, l);) v.push_back(l);
  return v;
}

}  // namespace

TEST(Slips, MetricsNumberEpochsFromOne) {
  const std::string d = memfit::testing::temp_dir("slip-epochs");
  auto r = memfit::testing::run_memfit("train --epochs 3 --out " + d + kSmall);
  ASSERT_EQ(r.code, 0) << r.out;
  auto m = lines_of(d + "/metrics.jsonl");
  ASSERT_EQ(m.size(), 3u);
  for (int e = 1; e <= 3; ++e) {
    EXPECT_EQ(memfit::testing::json_number(m[e - 1], "epoch"), e) << m[e - 1];
    EXPECT_EQ(memfit::testing::json_number(m[e - 1], "step"), 4 * e) << m[e - 1];  // 256 / 64 steps an epoch
  }
}

TEST(Slips, EvalEveryZeroEvaluatesNothing) {
  const std::string d = memfit::testing::temp_dir("slip-noeval");
  auto r = memfit::testing::run_memfit("train --steps 3 --eval-every 0 --json --out " + d + kSmall);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("eval step"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("test_accuracy"), std::string::npos) << r.out;
  EXPECT_TRUE(lines_of(d + "/metrics.jsonl").empty());
  // A checkpoint is still written.
  EXPECT_TRUE(std::ifstream(d + "/checkpoint.safetensors").good());
}

TEST(Slips, BadNumbersAreUsageErrorsNamingTheFlag) {
  struct Case {
    std::string args, flag;
  } cases[] = {{"--subset 0", "--subset"},           {"--subset 200%", "--subset"},
               {"--test-subset 1.5", "--test-subset"}, {"--subset abc", "--subset"},
               {"--batch 0", "--batch"},              {"--batch -4", "--batch"},
               {"--epochs 0", "--epochs"},            {"--eval-every -3", "--eval-every"}};
  for (const Case& c : cases) {
    auto r = memfit::testing::run_memfit("train " + c.args + " --steps 1 --out /tmp/memfit-test-slip-bad");
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find("memfit: " + c.flag), std::string::npos) << c.args << "\n" << r.out;
  }
  auto p = memfit::testing::run_memfit("plan --batch 0");
  EXPECT_EQ(p.code, 2) << p.out;
  EXPECT_NE(p.out.find("--batch must be positive"), std::string::npos) << p.out;
}

// --dropout: a malformed spec is a usage error naming the flag; a model that
// is neither an ONNX file nor a zoo GPT (which takes a bare probability) is
// refused, saying so.
TEST(Slips, DropoutFlagIsCheckedAndOnlyForOnnx) {
  for (const char* bad : {"classifier.1", "classifier.1=0", "classifier.1=1.5", "=0.2", "over:fc=0.2", "1", "-0.1"}) {
    auto r = memfit::testing::run_memfit(std::string("train --dropout ") + bad +
                                         " --steps 1 --out /tmp/memfit-test-slip-bad");
    EXPECT_EQ(r.code, 2) << bad << "\n" << r.out;
    EXPECT_NE(r.out.find("memfit: --dropout"), std::string::npos) << bad << "\n" << r.out;
  }
  for (const char* spec : {"fc1=0.2", "0.2"}) {
    auto r = memfit::testing::run_memfit(std::string("plan --model convnet --dropout ") + spec);
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("is neither"), std::string::npos) << r.out;
  }
}

TEST(Slips, LinearWithoutFlattenSaysToFlatten) {
  const std::string d = memfit::testing::temp_dir("slip-flatten");
  std::ofstream(d + "/m.mf") << "conv conv1 out=8 k=3 pad=1\nrelu\nlinear fc out=classes\n";
  auto r = memfit::testing::run_memfit("plan --model " + d + "/m.mf");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("it comes from layer 'fc' (linear)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("add `flatten`"), std::string::npos) << r.out;
}

// A bad model file is a file error (rc 1) that says so and names the file
// and line, not a usage dump.
TEST(Slips, BadModelFileSaysBadModelFileWithFileAndLine) {
  const std::string d = memfit::testing::temp_dir("slip-modelfile");
  std::ofstream(d + "/m.mf") << "conv conv1 out=8 k=3 pad=1\nconv conv2 out=8 k=3 stride=0\n";
  auto r = memfit::testing::run_memfit("plan --model " + d + "/m.mf");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("memfit: bad model file: " + d + "/m.mf:2:"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("usage"), std::string::npos) << r.out;
}

TEST(Slips, JsonStdoutIsOnlyJsonWhenTheFitRuns) {
  // ConvNet at batch 256 plans ~190 MiB: the fit runs under 150 MiB.
  auto p = memfit::testing::run_memfit(std::vector<std::string>{"plan", "--json", "--batch", "256", "--memory", "150MiB", "--data-in", "memory"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const std::string j = memfit::testing::last_json_line(p.out);
  EXPECT_EQ(p.out, j + "\n") << "stdout holds the object and nothing else";
  EXPECT_NE(p.err.find("fitting it"), std::string::npos) << "the human lines go to stderr:\n" << p.err;
  EXPECT_EQ(memfit::testing::json_at(j, "fitted"), true) << j;
  // The fit changed the policy as asked (fp32, one micro-batch, nothing
  // recomputed, the update after backward) to fit.
  EXPECT_TRUE(memfit::testing::json_number(j, "accumulate") > 1 || memfit::testing::json_at(j, "update_in_backward") == true ||
              memfit::testing::json_string_field(j, "recompute") != "auto" ||
              memfit::testing::json_string_field(j, "precision") != "fp32")
      << j;
  EXPECT_EQ(memfit::testing::json_number(j, "micro_batch") * memfit::testing::json_number(j, "accumulate"), 256) << j;
  for (const char* k : {"precision", "recompute", "data_in"})
    EXPECT_NE(memfit::testing::json_string_field(j, k), "") << k << " in " << j;
  EXPECT_EQ(memfit::testing::json_string_field(j, "budget_source"), "--memory") << j;

  const std::string d = memfit::testing::temp_dir("slip-json");
  auto t = memfit::testing::run_memfit(std::vector<std::string>{"train", "--json", "--steps", "1", "--subset", "256",
                                                                "--test-subset", "64", "--threads", "2", "--out", d});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_EQ(t.out, memfit::testing::last_json_line(t.out) + "\n") << t.out;
  EXPECT_NE(t.err.find("predicted peak"), std::string::npos) << t.err;
  EXPECT_NE(t.err.find("done: 1 steps"), std::string::npos) << t.err;
}
