// The budget check and the plan command, through the memfit binary.
//  - A budget below the plan fails before any arena is touched: non-zero
//    exit, a message with the predicted peak, the budget, the largest
//    classes and the smallest budget that works; the child's peak RSS stays
//    far below the plan. That smallest budget then fits.
//  - `memfit plan` prints the breakdown, the ten largest buffers with their
//    layers, the total without reuse and the reuse factor; with --json one
//    object whose classes add up to the total.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>

#include "run_binary.hpp"

using memfit::testing::json_at;
using memfit::testing::json_uint;
using memfit::testing::last_json_line;
using memfit::testing::run_memfit;

namespace {
const std::vector<std::string> kRun = {"--model", "resnet18", "--batch", "256", "--subset", "2000"};

std::vector<std::string> args(std::vector<std::string> head, const std::vector<std::string>& tail) {
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}
}  // namespace

TEST(MemoryBudget, BelowThePlanFailsBeforeAllocating) {
  auto plan = run_memfit(args({"plan", "--json", "--no-fit", "--memory", "1TiB"}, kRun));
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const size_t total = json_uint(plan.out, "total_bytes");
  const size_t arena = json_uint(plan.out, "by_class/activations_arena");
  ASSERT_GT(total, size_t(512) << 20) << plan.out;

  // --no-fit: no search for a smaller micro-batch or recomputation policy.
  auto r = run_memfit(
      args({"train", "--no-fit", "--memory", "64MiB", "--steps", "1", "--out", "/tmp/memfit-test-budget"}, kRun));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.exit_code, -1) << "killed instead of exiting";
  EXPECT_NE(r.err.find("predicted peak"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("budget of 64.0 MiB (--memory)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("largest parts: activations"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Nothing was allocated"), std::string::npos) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex("smallest budget that fits this plan is [0-9.]+ [MG]iB; --memory ([0-9]+)MiB")))
      << r.err;
  // The suggestion is this run's predicted peak rounded up to a MiB, plus one
  // MiB for the measured baseline's variation between runs. It is compared
  // with the peak the same process printed: the baseline is measured per
  // process, so the plan command's total above may differ by tens of KiB or
  // more (a loaded machine maps more pages before the measurement).
  std::smatch pk;
  ASSERT_TRUE(std::regex_search(r.err, pk, std::regex("predicted peak [0-9.]+ [MG]iB \\(([0-9]+) bytes\\)"))) << r.err;
  const size_t run_total = std::stoull(pk[1].str());
  const size_t suggested = std::stoull(m[1].str()) << 20;
  EXPECT_GE(suggested, run_total + (size_t(1) << 20));
  EXPECT_LT(suggested, run_total + (size_t(2) << 20));
  // The two processes plan the same buffers; only the baseline differs.
  EXPECT_LT(std::max(run_total, total) - std::min(run_total, total), size_t(8) << 20) << run_total << " vs " << total;
  // The arenas were never touched: the child stayed far below the plan.
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_LT(r.max_rss_bytes, total - arena / 2) << "peak RSS " << r.max_rss_bytes << " of a plan of " << total;
#endif
  std::printf("over budget: exit %d, child peak RSS %.1f MiB for a plan of %.1f MiB\n", r.exit_code,
              r.max_rss_bytes / 1048576.0, total / 1048576.0);

  // The suggested budget is enough.
  auto fits = run_memfit(args({"plan", "--no-fit", "--memory", m[1].str() + "MiB"}, kRun));
  EXPECT_EQ(fits.exit_code, 0) << fits.out << fits.err;
  auto short_of_it = run_memfit(args({"plan", "--no-fit", "--memory", std::to_string(total - (size_t(4) << 20))}, kRun));
  EXPECT_NE(short_of_it.exit_code, 0);
}

TEST(MemoryBudget, NothingFitsFailsBeforeAllocatingToo) {
  // With the automatic fit (the default) a budget that no policy meets also
  // stops before any arena is touched.
  auto plan = run_memfit(args({"plan", "--json", "--no-fit", "--memory", "1TiB"}, kRun));
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const size_t total = json_uint(plan.out, "total_bytes");
  const size_t arena = json_uint(plan.out, "by_class/activations_arena");
  auto r = run_memfit(args({"train", "--memory", "64MiB", "--steps", "1", "--out", "/tmp/memfit-test-budget"}, kRun));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.exit_code, -1) << "killed instead of exiting";
  EXPECT_NE(r.err.find("Nothing was allocated"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("smallest budget"), std::string::npos) << r.err;
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_LT(r.max_rss_bytes, total - arena / 2) << "peak RSS " << r.max_rss_bytes << " of a plan of " << total;
#endif
}

TEST(MemoryBudget, PlanJsonAddsUp) {
  // As planned, and with update in backward (gradients inside the arena).
  for (const bool uib : {false, true}) {
    std::vector<std::string> head = {"plan", "--json", "--memory", "1TiB"};
    if (uib) head.push_back("--update-in-backward");
    auto r = run_memfit(args(head, kRun));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string j = last_json_line(r.out);
    ASSERT_FALSE(j.empty()) << r.out;
    EXPECT_EQ(r.out, j + "\n") << "--json prints one object and nothing else";
    size_t sum = 0;
    // library_heap: oneDNN's own gemm buffers, nonzero on CPUs without its
    // brgemm kernels (AVX2).
    for (const char* k : {"baseline", "parameters", "gradients", "optimizer_state", "activations_arena", "library_heap",
                          "inputs", "arena_rounding", "data_pipeline", "evaluation"}) {
      const std::string path = std::string("by_class/") + k;
      EXPECT_TRUE(json_at(j, path).is_number_unsigned()) << k;
      sum += json_uint(j, path);
    }
    const size_t total = json_uint(j, "total_bytes");
    EXPECT_EQ(sum, total);
    // The arena at its peak: saved + transient + gradients + scratch + fragmentation.
    EXPECT_EQ(json_uint(j, "by_class/saved_activations") + json_uint(j, "by_class/transient_activations") +
                  json_uint(j, "by_class/arena_gradients") + json_uint(j, "by_class/kernel_scratch") +
                  json_uint(j, "by_class/fragmentation"),
              json_uint(j, "by_class/activations_arena"));
    EXPECT_GT(json_uint(j, "naive_bytes"), total);
    // One memory space on the CPU, in memory: the host's RAM holds the
    // total, against the budget.
    ASSERT_EQ(json_at(j, "memory_spaces").size(), 1u) << j;
    EXPECT_EQ(json_at(j, "memory_spaces/0/kind"), "host") << j;
    EXPECT_EQ(json_uint(j, "memory_spaces/0/bytes"), total) << j;
    EXPECT_EQ(json_uint(j, "memory_spaces/0/budget_bytes"), json_uint(j, "budget_bytes")) << j;
    EXPECT_EQ(json_at(j, "memory_spaces/0/fits"), true) << j;
    EXPECT_GT(json_uint(j, "by_class/baseline"), size_t(4) << 20) << "the baseline is measured";
    EXPECT_GT(json_uint(j, "by_class/kernel_scratch"), 0u) << "oneDNN's scratchpads are in the arena";
    EXPECT_TRUE(json_at(j, "reuse_factor").is_number()) << j;
    EXPECT_EQ(json_at(j, "update_in_backward").get<bool>(), uib) << j;
    if (uib) {
      EXPECT_EQ(json_uint(j, "by_class/gradients"), 0u) << j;
      EXPECT_LT(json_uint(j, "gradients_live_bytes"), json_uint(j, "gradients_unfused_bytes")) << j;
    } else {
      EXPECT_EQ(json_uint(j, "by_class/arena_gradients"), 0u) << j;
    }
  }
}

TEST(MemoryBudget, PlanTextShowsLargestBuffersAndReuse) {
  auto r = run_memfit({"plan", "--model", "resnet18", "--batch", "64", "--memory", "1TiB"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* s : {"baseline", "parameters", "gradients", "optimizer state", "activations arena",
                        "saved for backward", "kernel scratch", "data pipeline", "predicted peak", "without planning",
                        "reuse factor", "largest buffers:"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  const std::string tail = r.out.substr(r.out.find("largest buffers:"));
  // Ten lines: size, kind, layer, (buffer).
  const std::regex line("\\n +[0-9.]+ (B|KiB|MiB|GiB) +(saved|transient|scratch) +(layer[0-9.]+[a-z0-9.]*|conv1|bn1|fc|[a-z0-9.]+) \\(");
  size_t n = 0;
  for (std::sregex_iterator it(tail.begin(), tail.end(), line), e; it != e; ++it) ++n;
  EXPECT_EQ(n, 10u) << tail;
}
