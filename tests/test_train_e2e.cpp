// End to end: `memfit train` on a 2,000-image Fashion-MNIST subset learns
// (test accuracy >= 0.75 on the full test split), writes metrics and a
// checkpoint that loads as safetensors.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "cli_util.hpp"
#include "io/safetensors.hpp"

using namespace memfit::testing;

TEST(TrainE2E, SubsetLearns) {
  const std::string out = temp_dir("e2e");
  RunResult r = run_memfit("train --subset 2000 --epochs 4 --batch 32 --lr 0.05 --json --progress lines --out " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("predicted peak"), std::string::npos) << "the plan is printed first";
  const double acc = json_field(r.out, "test_accuracy");
  EXPECT_GE(acc, 0.75) << r.out;
  EXPECT_EQ(json_field(r.out, "steps"), 4 * (2000 / 32));
  EXPECT_GT(json_field(r.out, "images_per_second"), 0);
  // The first step and the warm rate after it split the training time: the
  // first step's seconds plus the other steps' samples at the warm rate are
  // all the samples at the run's rate (the same clock's sums).
  const double first = json_field(r.out, "first_step_seconds"), warm = json_field(r.out, "warm_images_per_second");
  ASSERT_GT(first, 0) << r.out;
  ASSERT_GT(warm, 0) << r.out;
  const double samples = 4.0 * (2000 / 32) * 32;
  const double total = samples / json_field(r.out, "images_per_second");
  EXPECT_NEAR(first + (samples - 32) / warm, total, 1e-6 * total) << r.out;
  EXPECT_GT(json_field(r.out, "peak_rss_bytes"), 0);
  EXPECT_GT(json_field(r.out, "planned_peak_bytes"), 0);
  // metrics.jsonl: one object per evaluation (every epoch) with the documented fields.
  std::ifstream m(out + "/metrics.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(m, line)) {
    ++lines;
    const Json j = last_json(line);
    for (const char* k : {"epoch", "step", "train_loss", "test_loss", "test_accuracy", "images_per_second",
                          "peak_rss_bytes", "planned_peak_bytes"})
      EXPECT_TRUE(j.contains(k)) << k << " missing in " << line;
  }
  EXPECT_EQ(lines, 4);
  // The weights load as safetensors with PyTorch names.
  auto f = memfit::io::SafetensorsFile::load(out + "/model.safetensors");
  ASSERT_NE(f.find("conv1.weight"), nullptr);
  EXPECT_EQ(f.find("conv1.weight")->shape, (std::vector<int64_t>{32, 1, 5, 5}));
  ASSERT_NE(f.find("fc2.bias"), nullptr);
}
