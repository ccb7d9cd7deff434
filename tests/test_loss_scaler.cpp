// fp16 dynamic loss scaling as a state machine (train/loss_scaler.hpp): an
// overflow skips the step and halves the scale (never below 1), kGrowth good
// steps in a row double it (never above kMaxScale), and the state survives a
// checkpoint's metadata strings exactly.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "train/loss_scaler.hpp"

using memfit::train::LossScaler;

namespace {

void good_steps(LossScaler& s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) ASSERT_FALSE(s.record(true, i)) << "good step " << i << " was skipped";
}

// An overflow at `step`: skipped, with this line, and the scale after it.
void expect_skip(LossScaler& s, int64_t step, const std::string& line, double scale_after) {
  const int64_t skipped = s.skipped_steps();
  auto m = s.record(false, step);
  ASSERT_TRUE(m) << "an overflow at step " << step << " was not skipped";
  EXPECT_EQ(*m, line);
  EXPECT_EQ(s.scale(), scale_after);
  EXPECT_EQ(s.skipped_steps(), skipped + 1);
  EXPECT_EQ(s.good_steps(), 0) << "an overflow restarts the count of good steps";
}

}  // namespace

TEST(LossScaler, OffKeepsScaleOneAndWritesNothing) {
  LossScaler s(false, 65536);
  EXPECT_FALSE(s.enabled());
  EXPECT_EQ(s.scale(), 1.0);
  std::map<std::string, std::string> extra;
  s.save(extra);
  EXPECT_TRUE(extra.empty());
  s.restore({{"loss_scale", "1024"}, {"loss_scale_good", "3"}});
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_EQ(s.good_steps(), 0);
}

TEST(LossScaler, OverflowHalvesAndSkipsWithAMessage) {
  LossScaler s(true, 65536);
  good_steps(s, 7);
  EXPECT_EQ(s.good_steps(), 7);
  expect_skip(s, 7, "fp16: gradients overflowed at step 7 with loss scale 65536; step skipped, loss scale -> 32768",
              32768);
  expect_skip(s, 8, "fp16: gradients overflowed at step 8 with loss scale 32768; step skipped, loss scale -> 16384",
              16384);
  EXPECT_EQ(s.skipped_steps(), 2);
}

TEST(LossScaler, ScaleNeverFallsBelowOne) {
  LossScaler s(true, 2);
  expect_skip(s, 0, "fp16: gradients overflowed at step 0 with loss scale 2; step skipped, loss scale -> 1", 1);
  expect_skip(s, 1, "fp16: gradients overflowed at step 1 with loss scale 1; step skipped, loss scale -> 1", 1);
  EXPECT_EQ(s.skipped_steps(), 2);
}

TEST(LossScaler, DoublesAfterGrowthGoodStepsInARow) {
  LossScaler s(true, 1024);
  good_steps(s, LossScaler::kGrowth - 1);
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_EQ(s.good_steps(), LossScaler::kGrowth - 1);
  EXPECT_FALSE(s.record(true, LossScaler::kGrowth - 1));
  EXPECT_EQ(s.scale(), 2048.0);
  EXPECT_EQ(s.good_steps(), 0);
  // An overflow in between starts the count again.
  good_steps(s, LossScaler::kGrowth - 1);
  ASSERT_TRUE(s.record(false, 0));
  EXPECT_EQ(s.scale(), 1024.0);
  good_steps(s, LossScaler::kGrowth - 1);
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_EQ(s.skipped_steps(), 1);
}

TEST(LossScaler, GrowthStopsAtTheCap) {
  EXPECT_EQ(LossScaler::kMaxScale, 16777216.0);
  LossScaler s(true, LossScaler::kMaxScale / 2);
  good_steps(s, LossScaler::kGrowth);
  EXPECT_EQ(s.scale(), LossScaler::kMaxScale);
  good_steps(s, LossScaler::kGrowth);
  EXPECT_EQ(s.scale(), LossScaler::kMaxScale);
  EXPECT_EQ(s.good_steps(), 0);
}

TEST(LossScaler, StateRoundTripsThroughTheCheckpointStrings) {
  LossScaler s(true, 65536);
  ASSERT_TRUE(s.record(false, 0));
  good_steps(s, 5);
  std::map<std::string, std::string> extra{{"batch", "64"}};
  s.save(extra);
  EXPECT_EQ(extra.at("loss_scale"), "32768");
  EXPECT_EQ(extra.at("loss_scale_good"), "5");
  EXPECT_EQ(extra.at("batch"), "64") << "other metadata is left alone";

  LossScaler t(true, 65536);
  t.restore(extra);
  EXPECT_EQ(t.scale(), 32768.0);
  EXPECT_EQ(t.good_steps(), 5);
  // The restored machine continues where the saved one was: kGrowth - 5
  // more good steps double it.
  good_steps(t, LossScaler::kGrowth - 6);
  EXPECT_EQ(t.scale(), 32768.0);
  EXPECT_FALSE(t.record(true, 0));
  EXPECT_EQ(t.scale(), 65536.0);

  // The largest scale is written with every digit (8 significant digits).
  LossScaler big(true, LossScaler::kMaxScale);
  std::map<std::string, std::string> e2;
  big.save(e2);
  EXPECT_EQ(e2.at("loss_scale"), "16777216");
}

TEST(LossScaler, RestoreWithoutTheStateKeepsTheInitialScale) {
  LossScaler s(true, 4096);
  s.restore({{"batch", "64"}});
  EXPECT_EQ(s.scale(), 4096.0);
  EXPECT_EQ(s.good_steps(), 0);
}
