// Plans over several memory spaces, run on a machine without a GPU: the
// test device "cpu-own-memory" (runtime/device.hpp) has 1 GiB of memory of
// its own that memory_info reports, as a GPU's, and arenas the host cannot
// address. A run on it is planned as a GPU run is: the arenas against the
// device's budget, the host's RAM (baseline, data pipeline, staging) apart
// against its own (--memory, else the host's limit).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "idx_files.hpp"
#include "json_out.hpp"
#include "run_binary.hpp"
#include "runtime/device.hpp"
#include "runtime/tier_store.hpp"

namespace {

using memfit::testing::ChildResult;
using memfit::testing::Json;
using memfit::testing::TempDir;

// Fashion-MNIST-shaped IDX files: n training and 128 test images.
void write_idx(const TempDir& d, uint32_t n) {
  for (const auto& [split, count] : {std::pair<std::string, uint32_t>{"train", n}, {"t10k", 128}}) {
    std::vector<uint8_t> labels(count);
    for (uint32_t i = 0; i < count; ++i) labels[i] = static_cast<uint8_t>(i % 10);
    memfit::testing::write_bytes(d / (split + "-labels-idx1-ubyte"), memfit::testing::idx_labels(labels));
    memfit::testing::write_bytes(d / (split + "-images-idx3-ubyte"),
                                 memfit::testing::idx_images(count, 28, 28, [](uint32_t i) { return uint8_t(i * 13); }));
  }
}

ChildResult memfit_run(const std::string& args) {
  std::vector<std::string> argv;
  std::istringstream in(args);
  for (std::string w; in >> w;) argv.push_back(w);
  return memfit::testing::run_memfit(argv);
}

// The memory space of this kind in a plan's JSON (null if none).
Json space(const std::string& out, const std::string& kind) {
  const Json plan = memfit::testing::last_json(out);
  for (const Json& s : plan.at("memory_spaces"))
    if (s.at("kind") == kind) return s;
  return Json();
}

constexpr size_t kMiB = size_t(1) << 20;

TEST(MemorySpaces, ADeviceOfItsOwnHoldsTheArenasAndTheHostHasItsOwnBudget) {
  TempDir d("spaces");
  write_idx(d, 1024);
  const auto r = memfit_run("plan --device cpu-own-memory --model convnet --batch 64 --memory 900MiB --json --data " +
                            d.path.string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const Json dev = space(r.out, "device"), host = space(r.out, "host");
  ASSERT_FALSE(dev.is_null()) << r.out;
  ASSERT_FALSE(host.is_null()) << r.out;
  // The device's space: the plan's total, against its free memory less the
  // margin (fit/budget.hpp: 2% and 32 MiB); nothing is allocated by a plan.
  const size_t free = memfit::kOwnMemoryDeviceBytes;
  EXPECT_EQ(dev.at("bytes").get<size_t>(), memfit::testing::json_uint(r.out, "total_bytes"));
  EXPECT_EQ(dev.at("budget_bytes").get<size_t>(), free - (free / 50 + 32 * kMiB));
  EXPECT_NE(dev.at("budget_source").get<std::string>().find("free memory of"), std::string::npos) << r.out;
  // The host's: what the process holds beside it, against --memory.
  EXPECT_EQ(host.at("bytes").get<size_t>(), memfit::testing::json_uint(r.out, "host_bytes"));
  EXPECT_EQ(host.at("budget_bytes").get<size_t>(), 900 * kMiB);
  EXPECT_EQ(host.at("budget_source"), "--memory");
  EXPECT_TRUE(host.at("fits").get<bool>());
  EXPECT_EQ(memfit::testing::json_uint(r.out, "host_budget_bytes"), 900 * kMiB);
  // The text plan names both spaces and their budgets.
  EXPECT_NE(r.err.find("memory spaces:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("predicted device peak"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the host's own budget"), std::string::npos) << r.err;
}

// The GPU's fit test on the test device: a device budget below what the
// plan needs is met by the fit, and the run takes no more of the device's
// memory than the budget.
TEST(MemorySpaces, TheFitKeepsTheStepInsideTheDevicesBudget) {
  TempDir d("spaces_fit");
  write_idx(d, 1024);
  const std::string base = "--device cpu-own-memory --model convnet --batch 256 --json --data " + d.path.string();
  const auto whole = memfit_run("plan " + base);
  ASSERT_EQ(whole.exit_code, 0) << whole.out << whole.err;
  const size_t need = memfit::testing::json_uint(whole.out, "total_bytes");
  const size_t budget = need * 6 / 10;
  const std::string flag = " --device-memory " + std::to_string(budget);
  const auto fitted = memfit_run("plan " + base + flag);
  ASSERT_EQ(fitted.exit_code, 0) << fitted.out << fitted.err;
  const size_t planned = memfit::testing::json_uint(fitted.out, "total_bytes");
  std::printf("convnet b256 on cpu-own-memory: %zu bytes unconstrained; budget %zu: planned %zu\n", need, budget, planned);
  EXPECT_LE(planned, budget);
  EXPECT_NE(fitted.err.find("fitting it"), std::string::npos) << fitted.err;
  const auto t = memfit_run("train " + base + flag + " --steps 3 --eval-every 0 --out " + d / "run");
  ASSERT_EQ(t.exit_code, 0) << t.out << t.err;
  const Json j = memfit::testing::last_json(t.out);
  const size_t used = j.at("device_used_bytes").get<size_t>();
  std::printf("trained 3 steps: device memory used %zu of the budget %zu (planned %zu)\n", used, budget,
              j.at("device_planned_bytes").get<size_t>());
  EXPECT_LE(used, budget);
  // What the device holds is the plan's device total to the byte: its
  // arenas, in whole pages as allocated (this device's alignment is the
  // page; a GPU's, 256 bytes, is finer).
  EXPECT_EQ(used, planned);
}

// A model whose weights and optimizer state outgrow the device's memory (a
// GPU's, here the test device's): the fit keeps them in the offload tier,
// whose copies reach the device's memory through the device, and the run
// takes no more of the device's memory than its budget. The budget is 60%
// of the parameters and optimizer state alone (exact AdamW must hold both
// in memory, so nothing fits there). Not where the directory is a tmpfs:
// the fit does not offload onto memory.
TEST(MemorySpaces, TheFitOffloadsWhatTheDevicesMemoryCannotHold) {
  TempDir d("spaces_offload");
  if (memfit::ram_backed(d.path.string())) GTEST_SKIP() << d.path << " is a tmpfs";
  {
    std::ofstream text(d / "text.txt");
    for (int i = 0; i < 3000; ++i)
      text << "Line " << i << ": the quick brown fox jumps over the lazy dog, " << (i * 7919) % 1000 << " times.\n";
  }
  const std::string base = "--device cpu-own-memory --model gpt-char --optimizer adamw --batch 4 --json --data " +
                           (d / "text.txt") + " --offload-dir " + d.path.string();
  const auto whole = memfit_run("plan " + base);
  ASSERT_EQ(whole.exit_code, 0) << whole.out << whole.err;
  const Json by_class = memfit::testing::last_json(whole.out).at("by_class");
  const size_t held = by_class.at("parameters").get<size_t>() + by_class.at("optimizer_state").get<size_t>();
  const size_t budget = held * 6 / 10;
  const std::string flag = " --device-memory " + std::to_string(budget);
  const auto t = memfit_run("train " + base + flag + " --steps 2 --eval-every 0 --out " + d / "run");
  ASSERT_EQ(t.exit_code, 0) << t.out << t.err;
  EXPECT_NE(t.err.find("nothing fits in memory; offloading to " + d.path.string()), std::string::npos) << t.err;
  EXPECT_NE(t.err.find("offload tier (disk)"), std::string::npos) << t.err;
  const Json j = memfit::testing::last_json(t.out);
  const size_t used = j.at("device_used_bytes").get<size_t>();
  std::printf("gpt-char b4 AdamW: parameters and state %zu bytes; device budget %zu: used %zu (planned %zu)\n", held,
              budget, used, j.at("device_planned_bytes").get<size_t>());
  EXPECT_LE(used, budget);
  EXPECT_EQ(used, j.at("device_planned_bytes").get<size_t>());
  EXPECT_TRUE(std::isfinite(j.at("final_train_loss").get<double>()));
}

TEST(MemorySpaces, AHostOverItsBudgetIsRefusedNamingTheHost) {
  TempDir d("spaces_host");
  write_idx(d, 1024);
  // 16 MiB is under any process's baseline (the binary, its libraries and
  // threads), whatever the device's memory holds.
  const auto r = memfit_run("train --device cpu-own-memory --model convnet --batch 64 --steps 2 --memory 16MiB --out " +
                            d / "run" + " --data " + d.path.string());
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("over the host's budget of 16.0 MiB (--memory)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the device's memory is not what runs out"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Nothing was allocated"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--memory "), std::string::npos) << r.err;
}

// The dataset is the host's: with --data-in auto it streams from disk when
// the host's RAM cannot hold it, whatever the device's memory could.
TEST(MemorySpaces, TheDatasetStreamsWhenTheHostsRamCannotHoldIt) {
  TempDir d("spaces_data");
  write_idx(d, 60000);  // 47 MB of pixels
  const std::string base = "plan --device cpu-own-memory --model convnet --batch 64 --json --data " + d.path.string();
  const auto disk = memfit_run(base + " --data-in disk");
  ASSERT_EQ(disk.exit_code, 0) << disk.out << disk.err;
  const auto mem = memfit_run(base + " --data-in memory");
  ASSERT_EQ(mem.exit_code, 0) << mem.out << mem.err;
  const size_t host_disk = memfit::testing::json_uint(disk.out, "host_bytes");
  const size_t host_mem = memfit::testing::json_uint(mem.out, "host_bytes");
  std::printf("host RAM: %zu bytes with the dataset streamed, %zu in memory\n", host_disk, host_mem);
  // The two differ by the dataset's pixels at least (the streamed one holds
  // its labels and loader buffers only).
  ASSERT_GT(host_mem, host_disk + 40 * kMiB);
  // Half-way between: the baseline's variation between runs (a few MiB) is
  // far inside the 20+ MiB either side.
  const size_t host_budget = (host_disk + host_mem) / 2;
  const std::string flag = " --memory " + std::to_string(host_budget);
  const auto fit = memfit_run(base + " --data-in auto" + flag);
  ASSERT_EQ(fit.exit_code, 0) << fit.out << fit.err;
  EXPECT_EQ(memfit::testing::json_string_field(fit.out, "data_in"), "disk") << fit.out;
  EXPECT_NE(fit.err.find("the dataset streams from disk"), std::string::npos) << fit.err;
  const Json host = space(fit.out, "host");
  EXPECT_LE(host.at("bytes").get<size_t>(), host_budget);
  // With the dataset held in memory as asked, the plan is refused.
  const auto held = memfit_run("train --device cpu-own-memory --model convnet --batch 64 --steps 1 --data-in memory --out " +
                               d / "run" + " --data " + d.path.string() + flag);
  EXPECT_NE(held.exit_code, 0) << held.out << held.err;
  EXPECT_NE(held.err.find("over the host's budget"), std::string::npos) << held.err;
  EXPECT_NE(held.err.find("--data-in disk"), std::string::npos) << held.err;
}

TEST(MemorySpaces, DeviceMemoryIsTheBudgetOfADeviceWithMemoryOfItsOwn) {
  const auto r = memfit_run("plan --device cpu --model convnet --device-memory 100MiB");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--device-memory is the budget of a device with memory of its own"), std::string::npos) << r.err;
}

}  // namespace
