// Finding the container's memory limit.
//  - On fake /proc + /sys trees: the process's own cgroup from
//    /proc/self/cgroup and /proc/self/mountinfo, v1 and v2, nested (the
//    smallest limit on the way up wins), unlimited (v1's ~2^63, v2's "max"),
//    hybrid (v1 memory controller beside an empty v2 hierarchy), a
//    container's namespaced view, memory.high, and the usage of other
//    processes in the cgroup.
//  - On this machine: a child memory cgroup with a 1 GiB limit; memfit plan
//    inside it reports that limit minus the margin without --memory, and a
//    training run that would not fit the machine-wide budget's plan is
//    fitted and not killed.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli_util.hpp"
#include "fit/cgroup.hpp"
#include "fit/budget.hpp"

namespace fs = std::filesystem;
using namespace memfit::train;

namespace {

constexpr size_t MiB = size_t(1) << 20, GiB = size_t(1) << 30;

struct FakeTree {
  std::string root = memfit::testing::temp_dir("cgroup-tree");
  void put(const std::string& rel, const std::string& text) const {
    fs::path p = fs::path(root) / rel.substr(1);
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  ~FakeTree() { fs::remove_all(root); }
};

const char* kV2Mounts =
    "23 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
    "31 23 0:28 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
const char* kV1Mounts =
    "23 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime shared:5 - cgroup cgroup rw,memory\n";

}  // namespace

TEST(Cgroup, V2NestedTakesTheSmallestLimitOnTheWayUp) {
  FakeTree t;
  t.put("/proc/self/mountinfo", kV2Mounts);
  t.put("/proc/self/cgroup", "0::/user.slice/notebook/kernel\n");
  t.put("/sys/fs/cgroup/user.slice/memory.max", "8589934592\n");
  t.put("/sys/fs/cgroup/user.slice/notebook/memory.max", "1073741824\n");
  t.put("/sys/fs/cgroup/user.slice/notebook/kernel/memory.max", "max\n");
  t.put("/sys/fs/cgroup/user.slice/notebook/memory.swap.max", "0\n");
  auto c = cgroup_memory_limit(t.root, 0);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->version, 2);
  EXPECT_EQ(c->limit, GiB);
  EXPECT_EQ(c->file, "/sys/fs/cgroup/user.slice/notebook/memory.max");
  EXPECT_EQ(c->swap_limit, 0u);

  Budget b = detect_budget(std::nullopt, t.root);
  EXPECT_EQ(b.limit, GiB);
  EXPECT_EQ(b.margin, GiB / 10) << "10% of the limit (under the 128 MiB cap)";
  EXPECT_EQ(b.bytes, GiB - GiB / 10);  // 921.6 MiB
  EXPECT_EQ(b.describe(), "cgroup v2 /sys/fs/cgroup/user.slice/notebook/memory.max minus margin");
}

TEST(Cgroup, V2MemoryHighBindsWhenLowerThanMax) {
  FakeTree t;
  t.put("/proc/self/mountinfo", kV2Mounts);
  t.put("/proc/self/cgroup", "0::/a\n");
  t.put("/sys/fs/cgroup/a/memory.max", "1073741824\n");
  t.put("/sys/fs/cgroup/a/memory.high", "536870912\n");
  auto c = cgroup_memory_limit(t.root, 0);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->limit, 512 * MiB);
  EXPECT_EQ(c->file, "/sys/fs/cgroup/a/memory.high");
}

TEST(Cgroup, V1NestedUnlimitedChildUsesTheParentsLimit) {
  FakeTree t;
  t.put("/proc/self/mountinfo", kV1Mounts);
  t.put("/proc/self/cgroup", "9:cpu:/\n4:memory:/jupyter/kernel-1\n0::/\n");
  t.put("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  t.put("/sys/fs/cgroup/memory/jupyter/memory.limit_in_bytes", "805306368\n");
  t.put("/sys/fs/cgroup/memory/jupyter/memory.memsw.limit_in_bytes", "1073741824\n");
  t.put("/sys/fs/cgroup/memory/jupyter/kernel-1/memory.limit_in_bytes", "9223372036854771712\n");
  auto c = cgroup_memory_limit(t.root, 0);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->version, 1);
  EXPECT_EQ(c->limit, 768 * MiB);
  EXPECT_EQ(c->file, "/sys/fs/cgroup/memory/jupyter/memory.limit_in_bytes");
  EXPECT_EQ(c->swap_limit, 256 * MiB) << "memsw counts memory + swap";
  Budget b = detect_budget(std::nullopt, t.root);
  EXPECT_EQ(b.bytes, 768 * MiB - 768 * MiB / 10);
  EXPECT_EQ(b.describe(), "cgroup v1 /sys/fs/cgroup/memory/jupyter/memory.limit_in_bytes minus margin");
}

TEST(Cgroup, UnlimitedEverywhereFallsBackToMemAvailable) {
  FakeTree t;
  t.put("/proc/self/mountinfo", kV1Mounts);
  t.put("/proc/self/cgroup", "4:memory:/a\n");
  t.put("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  t.put("/sys/fs/cgroup/memory/a/memory.limit_in_bytes", "9223372036854771712\n");
  t.put("/proc/meminfo", "MemTotal:       4000000 kB\nMemFree:  100 kB\nMemAvailable:    2097152 kB\n");
  EXPECT_FALSE(cgroup_memory_limit(t.root, 0));
  Budget b = detect_budget(std::nullopt, t.root);
  EXPECT_EQ(b.limit, 2 * GiB);
  EXPECT_EQ(b.source, "MemAvailable");
  EXPECT_EQ(b.bytes, 2 * GiB - 128 * MiB);
}

TEST(Cgroup, HybridReadsTheV1MemoryControllerBesideAnEmptyV2Hierarchy) {
  FakeTree t;
  t.put("/proc/self/mountinfo", std::string(kV1Mounts) +
                                    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n");
  t.put("/proc/self/cgroup", "4:memory:/svc\n0::/svc\n");
  t.put("/sys/fs/cgroup/memory/svc/memory.limit_in_bytes", "536870912\n");
  fs::create_directories(fs::path(t.root) / "sys/fs/cgroup/unified/svc");  // no memory.max: no controller
  auto c = cgroup_memory_limit(t.root, 0);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->version, 1);
  EXPECT_EQ(c->limit, 512 * MiB);
}

TEST(Cgroup, ContainerViewReadsTheMountedDirectory) {
  // A container without a cgroup namespace: the mount shows /docker/abc,
  // and /proc/self/cgroup names that same path.
  FakeTree t;
  t.put("/proc/self/mountinfo",
        "35 31 0:32 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n");
  t.put("/proc/self/cgroup", "4:memory:/docker/abc\n");
  t.put("/sys/fs/cgroup/memory/memory.limit_in_bytes", "1073741824\n");
  auto c = cgroup_memory_limit(t.root, 0);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->limit, GiB);
  EXPECT_EQ(c->file, "/sys/fs/cgroup/memory/memory.limit_in_bytes");
}

TEST(Cgroup, EscapedMountPointsAreUnescaped) {
  FakeTree t;
  t.put("/proc/self/mountinfo", "31 23 0:28 / /sys/fs/my\\040cgroup rw - cgroup2 cgroup2 rw\n");
  t.put("/proc/self/cgroup", "0::/\n");
  t.put("/sys/fs/my cgroup/memory.max", "268435456\n");
  auto c = cgroup_memory_limit(t.root, 0);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->limit, 256 * MiB);
}

TEST(Cgroup, OtherProcessesInTheCgroupReduceTheBudget) {
  FakeTree t;
  t.put("/proc/self/mountinfo", kV2Mounts);
  t.put("/proc/self/cgroup", "0::/nb\n");
  t.put("/sys/fs/cgroup/nb/memory.max", "1073741824\n");
  t.put("/sys/fs/cgroup/nb/memory.current", "314572800\n");           // 300 MiB
  t.put("/sys/fs/cgroup/nb/memory.stat", "anon 1\nfile 104857600\n");  // 100 MiB page cache
  auto c = cgroup_memory_limit(t.root, 50 * MiB);                     // this process: 50 MiB
  ASSERT_TRUE(c);
  EXPECT_EQ(c->others, 150 * MiB);
  EXPECT_EQ(c->headroom(), GiB - 150 * MiB);
  // A looser limit with more room above does not win over it.
  t.put("/sys/fs/cgroup/memory.max", "2147483648\n");
  EXPECT_EQ(cgroup_memory_limit(t.root, 50 * MiB)->file, "/sys/fs/cgroup/nb/memory.max");
}

TEST(Cgroup, NoCgroupFilesMeansNoLimit) {
  FakeTree t;
  t.put("/proc/self/mountinfo", kV2Mounts);
  EXPECT_FALSE(cgroup_memory_limit(t.root, 0));
}

// ---------------------------------------------------------------------------
// A real child memory cgroup on this machine.

namespace {

std::string read_all(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

bool write_file(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

// The path of this process's cgroup in the v1 memory hierarchy or in v2.
std::string own_path(bool v1) {
  std::istringstream in(read_all("/proc/self/cgroup"));
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string ctrls = line.substr(a + 1, b - a - 1);
    if (v1 ? ("," + ctrls + ",").find(",memory,") != std::string::npos : line.compare(0, 3, "0::") == 0)
      return line.substr(b + 1);
  }
  return "";
}

// A memory cgroup made below this process's own, removed on destruction.
struct ChildCgroup {
  std::string dir, limit_file, procs;
  std::string why_not;  // empty when it was made
  explicit ChildCgroup(size_t limit) {
    const std::string name = "/memfit-test-" + std::to_string(::getpid());
    const std::string v1 = "/sys/fs/cgroup/memory";
    if (fs::exists(v1 + "/memory.limit_in_bytes")) {
      dir = v1 + (own_path(true) == "/" ? "" : own_path(true)) + name;
      limit_file = dir + "/memory.limit_in_bytes";
    } else if (fs::exists("/sys/fs/cgroup/cgroup.controllers")) {
      const std::string parent = "/sys/fs/cgroup" + (own_path(false) == "/" ? "" : own_path(false));
      if (read_all(parent + "/cgroup.subtree_control").find("memory") == std::string::npos &&
          !write_file(parent + "/cgroup.subtree_control", "+memory")) {
        why_not = "the memory controller is not enabled below " + parent + " and cannot be";
        return;
      }
      dir = parent + name;
      limit_file = dir + "/memory.max";
    } else {
      why_not = "no cgroup memory controller is mounted";
      return;
    }
    procs = dir + "/cgroup.procs";
    std::error_code ec;
    if (!fs::create_directory(dir, ec)) {
      why_not = "cannot create " + dir + ": " + (ec ? ec.message() : "exists");
      dir.clear();
      return;
    }
    if (!write_file(limit_file, std::to_string(limit))) why_not = "cannot write " + limit_file;
    if (fs::exists(dir + "/memory.swap.max")) write_file(dir + "/memory.swap.max", "0");
  }
  ~ChildCgroup() {
    if (!dir.empty()) ::rmdir(dir.c_str());
  }
};

struct InCgroup {
  int exit_code = -1, signal = 0;
  std::string out, err;
};

// Runs memfit with `args` as a process of the cgroup `cg`.
InCgroup run_in(const ChildCgroup& cg, const std::vector<std::string>& args) {
  const std::string base = "/tmp/memfit-test-cg-" + std::to_string(::getpid());
  std::vector<std::string> all{MEMFIT_BINARY};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  InCgroup r;
  pid_t pid = ::fork();
  if (pid == 0) {
    const std::string me = std::to_string(::getpid());
    int fd = ::open(cg.procs.c_str(), O_WRONLY);
    if (fd < 0 || ::write(fd, me.data(), me.size()) != static_cast<ssize_t>(me.size())) ::_exit(120);
    ::close(fd);
    int o = ::open((base + ".out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = ::open((base + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(o, 1);
    ::dup2(e, 2);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  if (WIFEXITED(st)) r.exit_code = WEXITSTATUS(st);
  if (WIFSIGNALED(st)) r.signal = WTERMSIG(st);
  r.out = read_all(base + ".out");
  r.err = read_all(base + ".err");
  std::remove((base + ".out").c_str());
  std::remove((base + ".err").c_str());
  return r;
}

}  // namespace

TEST(CgroupReal, PlanFindsTheLimitAndTrainingIsFittedNotKilled) {
  const size_t limit = 256 * MiB;
  ChildCgroup cg(limit);
  if (!cg.why_not.empty()) GTEST_SKIP() << "cannot make a memory cgroup here: " << cg.why_not;

  // No --memory: the budget is the cgroup's limit minus the margin.
  InCgroup plan = run_in(cg, {"plan", "--json", "--batch", "1024", "--no-fit", "--subset", "2048"});
  ASSERT_NE(plan.exit_code, 120) << "could not move the child into " << cg.procs;
  const std::string j = memfit::testing::json_string_field(plan.out, "budget_source");
  EXPECT_EQ(j.rfind("cgroup v", 0), 0u) << plan.out << plan.err;
  EXPECT_NE(j.find(cg.limit_file), std::string::npos) << j;
  EXPECT_NE(j.find("minus margin"), std::string::npos) << j;
  const double lim = memfit::testing::json_number(plan.out, "budget_limit_bytes");
  const double margin = memfit::testing::json_number(plan.out, "budget_margin_bytes");
  const double others = memfit::testing::json_number(plan.out, "budget_others_bytes");
  const double budget = memfit::testing::json_number(plan.out, "budget_bytes");
  const double total = memfit::testing::json_number(plan.out, "total_bytes");
  EXPECT_EQ(lim, static_cast<double>(limit)) << plan.out;
  EXPECT_EQ(margin, static_cast<double>(limit / 10));
  EXPECT_LT(others, 8.0 * MiB) << "the new cgroup holds nothing but memfit";
  EXPECT_EQ(budget, lim - margin - others);
  ASSERT_GT(total, static_cast<double>(limit)) << "the run must not fit the cgroup as asked";
  EXPECT_EQ(plan.exit_code, 1) << "a plan over budget exits 1";

  const std::vector<std::string> run = {"train", "--batch", "1024", "--subset", "2048", "--test-subset", "256",
                                        "--steps", "2", "--threads", "2", "--json", "--out",
                                        memfit::testing::temp_dir("cgroup-run")};
  // Control: with the machine's budget the same run plans ~450 MiB, so the
  // kernel kills it inside this cgroup; proof that the limit is enforced.
  std::vector<std::string> unfitted = run;
  unfitted.insert(unfitted.end(), {"--memory", "4GiB"});
  InCgroup killed = run_in(cg, unfitted);
  EXPECT_EQ(killed.signal, SIGKILL) << "exit " << killed.exit_code << "\n" << killed.err;
  EXPECT_NE(killed.err.find("predicted peak"), std::string::npos)
      << "the plan was printed before the arena was touched:\n" << killed.err;

  // Without --memory it is fitted into the cgroup and completes.
  InCgroup ok = run_in(cg, run);
  EXPECT_EQ(ok.signal, 0) << "killed by signal " << ok.signal << "\n" << ok.err;
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.err.find("fitting it"), std::string::npos) << ok.err;
  EXPECT_EQ(memfit::testing::json_number(ok.out, "steps"), 2) << ok.out;
  EXPECT_LE(memfit::testing::json_number(ok.out, "peak_rss_bytes"), static_cast<double>(limit)) << ok.out;
  std::printf("cgroup %s: budget %.1f MiB of a %.0f MiB limit; fitted run peak %.1f MiB\n", cg.dir.c_str(),
              budget / MiB, lim / MiB, memfit::testing::json_number(ok.out, "peak_rss_bytes") / MiB);
}
