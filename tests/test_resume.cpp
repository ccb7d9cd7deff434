// Exact resume: two uninterrupted epochs, and one epoch + kill -9 in the
// middle of the second + --resume, give bit-identical final weights and
// optimizer state (same thread count).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "cli_util.hpp"
#include "same_tensors.hpp"
#include "io/safetensors.hpp"

using namespace memfit::testing;

using memfit::testing::expect_same_tensors;

namespace {

const std::string kArgs = " --subset 1280 --test-subset 256 --epochs 2 --batch 64 --threads 2 --seed 7 --progress lines";

// Starts memfit, reads its output until it reports step >= kill_at, then kills it with SIGKILL.
int run_and_kill(const std::string& args, int kill_at, std::string& seen) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    std::string cmd = std::string(MEMFIT_BINARY) + " " + args;
    ::execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string line;
  char c;
  int killed_at = -1;
  while (::read(fds[0], &c, 1) == 1) {
    if (c != '\n') {
      line += c;
      continue;
    }
    seen += line + "\n";
    int step = 0, total = 0;
    if (std::sscanf(line.c_str(), "step %d/%d", &step, &total) == 2 && step >= kill_at) {
      ::kill(pid, SIGKILL);
      killed_at = step;
      break;
    }
    line.clear();
  }
  ::close(fds[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  return killed_at;
}

}  // namespace

TEST(Resume, KillNineMidEpochThenResumeIsBitIdentical) {
  const std::string a = temp_dir("resume-a"), b = temp_dir("resume-b");
  RunResult full = run_memfit("train" + kArgs + " --out " + a);
  ASSERT_EQ(full.code, 0) << full.out;

  // 1280 / 64 = 20 steps per epoch: kill in the middle of the second epoch.
  std::string seen;
  int killed = run_and_kill("train" + kArgs + " --out " + b, 30, seen);
  ASSERT_GE(killed, 30) << "the run ended before it could be killed:\n" << seen;
  ASSERT_LT(killed, 40) << seen;
  RunResult res = run_memfit("train" + kArgs + " --out " + b + " --resume " + b);
  ASSERT_EQ(res.code, 0) << res.out;
  EXPECT_NE(res.out.find("resumed from"), std::string::npos) << res.out;
  EXPECT_NE(res.out.find("at step 20"), std::string::npos) << res.out;

  expect_same_tensors(a + "/model.safetensors", b + "/model.safetensors");
  expect_same_tensors(a + "/checkpoint.safetensors", b + "/checkpoint.safetensors");
}
