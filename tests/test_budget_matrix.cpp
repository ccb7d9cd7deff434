// The budget matrix: ResNet-18 at effective batch 256 under shrinking
// budgets. memfit fits micro-batch, accumulation, precision, recomputation
// and data residency on its own; the measured peak (VmHWM of the process,
// which includes everything the plan does not know about) stays within the
// budget every time, and the effective batch is unchanged. With Adam the
// parameters, gradients and optimizer state alone are 170 MiB, so 192 MiB
// cannot be met: memfit says so before allocating and names the smallest
// budget, which SGD with momentum (128 MiB of state) then meets.
#include <gtest/gtest.h>

#include <cmath>

#include "cli_util.hpp"

using namespace memfit::testing;

namespace {

const std::string kRun = "train --model resnet18 --batch 256 --steps 2 --subset 1024 --test-subset 256 --threads 2 --json";

void expect_within(const std::string& opt, int mib) {
  const double budget = static_cast<double>(mib) * 1048576.0;
  RunResult r = run_memfit(kRun + " --optimizer " + opt + " --memory " + std::to_string(mib) + "MiB --out " +
                           temp_dir("budget-" + opt + std::to_string(mib)));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(json_field(r.out, "steps"), 2) << r.out;
  EXPECT_LE(json_field(r.out, "planned_peak_bytes"), budget) << r.out;
  EXPECT_LE(json_field(r.out, "peak_rss_bytes"), budget) << r.out;
  EXPECT_GT(json_field(r.out, "images_per_second"), 0.0) << r.out;
  // Fitted runs say what they chose; the effective batch never changes.
  if (r.out.find("fitting it") != std::string::npos) {
    EXPECT_NE(r.out.find("(effective batch 256 unchanged)"), std::string::npos) << r.out;
  }
}

TEST(BudgetMatrix, Adam256MiB) { expect_within("adam", 256); }
TEST(BudgetMatrix, Adam384MiB) { expect_within("adam", 384); }
TEST(BudgetMatrix, Adam512MiB) { expect_within("adam", 512); }
TEST(BudgetMatrix, Sgd192MiB) { expect_within("sgd", 192); }

TEST(BudgetMatrix, Adam192MiBNamesTheSmallestBudget) {
  RunResult r = run_memfit(kRun + " --optimizer adam --memory 192MiB --out " + temp_dir("budget-adam192"));
  EXPECT_EQ(r.code, 3) << r.out;
  const size_t at = r.out.find("the smallest budget that would work is ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const double smallest = std::strtod(r.out.c_str() + at + 39, nullptr);
  EXPECT_GT(smallest, 192.0) << r.out;  // MiB
  EXPECT_LT(smallest, 256.0) << r.out;
  EXPECT_NE(r.out.find("Nothing was allocated"), std::string::npos) << r.out;
}

}  // namespace
