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
#include "runtime/tier_store.hpp"

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

// In memory (--offload none), nothing fits: the refusal names the smallest budget.
TEST(BudgetMatrix, Adam192MiBNamesTheSmallestBudget) {
  RunResult r = run_memfit(kRun + " --optimizer adam --memory 192MiB --offload none --out " + temp_dir("budget-adam192"));
  EXPECT_EQ(r.code, 3) << r.out;
  const size_t at = r.out.find("the smallest budget that would work is ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const double smallest = std::strtod(r.out.c_str() + at + 39, nullptr);
  EXPECT_GT(smallest, 192.0) << r.out;  // MiB
  EXPECT_LT(smallest, 256.0) << r.out;
  EXPECT_NE(r.out.find("Nothing was allocated"), std::string::npos) << r.out;
}

// Left open, the fit adds the offload tier when nothing fits in memory:
// the same run trains with the optimizer state (or more) in a file beside
// it, the plan says so, and the process stays within the budget. Not where
// the run directory is a tmpfs: there the fit refuses to offload.
TEST(BudgetMatrix, Adam192MiBOffloadsToDisk) {
  const std::string dir = temp_dir("budget-adam192-offload");
  if (memfit::ram_backed(dir)) GTEST_SKIP() << dir << " is a tmpfs";
  const double budget = 192.0 * 1048576.0;
  RunResult r = run_memfit(kRun + " --optimizer adam --memory 192MiB --out " + dir);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("nothing fits in memory; offloading to " + dir), std::string::npos) << r.out;
  const size_t at = r.out.find("chosen:");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
  EXPECT_NE(line.find("offloaded to disk"), std::string::npos) << line;
  EXPECT_NE(line.find("of it offload I/O"), std::string::npos) << line;
  EXPECT_NE(r.out.find("offload tier (disk)"), std::string::npos) << r.out;
  // The plan's step time counts the I/O it does not overlap, at the speed
  // measured there.
  EXPECT_NE(r.out.find(" s offload I/O not overlapped)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("MB/s measured there"), std::string::npos) << r.out;
  EXPECT_LE(json_field(r.out, "planned_peak_bytes"), budget) << r.out;
  EXPECT_LE(json_field(r.out, "peak_rss_bytes"), budget) << r.out;
  // A tmpfs as the offload directory: not tried, and the refusal says why.
  if (memfit::ram_backed("/dev/shm")) {
    RunResult shm = run_memfit(kRun + " --optimizer adam --memory 192MiB --offload-dir /dev/shm --out " +
                               temp_dir("budget-adam192-shm"));
    EXPECT_EQ(shm.code, 3) << shm.out;
    EXPECT_NE(shm.out.find("Offloading to disk was not tried: /dev/shm is on a file system kept in memory"),
              std::string::npos)
        << shm.out;
  }
}

}  // namespace
