// Exact resume: two uninterrupted epochs, and one epoch + kill -9 in the
// middle of the second + --resume, give bit-identical final weights and
// optimizer state (same thread count).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
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

// Both run directories end with the same weights and optimizer state.
void expect_same_run(const std::string& a, const std::string& b) {
  expect_same_tensors(a + "/model.safetensors", b + "/model.safetensors");
  expect_same_tensors(a + "/checkpoint.safetensors", b + "/checkpoint.safetensors");
}

// `memfit train ARGS --out DIR`, killed with SIGKILL once it reports a step
// in [kill_at, before), then resumed from DIR to its end; the resumed run's
// output.
std::string kill_and_resume(const std::string& args, const std::string& dir, int kill_at, int before) {
  std::string seen;
  const int killed = run_and_kill("train" + args + " --out " + dir, kill_at, seen);
  EXPECT_GE(killed, kill_at) << "the run ended before it could be killed:\n" << seen;
  EXPECT_LT(killed, before) << seen;
  RunResult res = run_memfit("train" + args + " --out " + dir + " --resume " + dir);
  EXPECT_EQ(res.code, 0) << res.out;
  EXPECT_NE(res.out.find("resumed from"), std::string::npos) << res.out;
  return res.out;
}

}  // namespace

TEST(Resume, KillNineMidEpochThenResumeIsBitIdentical) {
  const std::string a = temp_dir("resume-a"), b = temp_dir("resume-b");
  RunResult full = run_memfit("train" + kArgs + " --out " + a);
  ASSERT_EQ(full.code, 0) << full.out;

  // 1280 / 64 = 20 steps per epoch: kill in the middle of the second epoch.
  const std::string out = kill_and_resume(kArgs, b, 30, 40);
  ASSERT_FALSE(HasFailure());
  EXPECT_NE(out.find("at step 20"), std::string::npos) << out;
  expect_same_run(a, b);
}

namespace {

using memfit::testing::write_fox_corpus;

// Runs `args` to the end in a, and in b killed with SIGKILL at a reported
// step >= kill_at (of `steps`) and resumed; the two end bit-identical.
void expect_kill_resume_identical(const std::string& args, const std::string& a, const std::string& b, int kill_at,
                                  int steps) {
  RunResult full = run_memfit("train" + args + " --out " + a);
  ASSERT_EQ(full.code, 0) << full.out;
  kill_and_resume(args, b, kill_at, steps);
  if (!::testing::Test::HasFailure()) expect_same_run(a, b);
}

// gpt-tiny on the corpus: its steps take about a millisecond, so the run is
// long in steps for the kill to land in it; a checkpoint every 100. One
// thread: a tiny model's steps are fastest so, and do not stall on a busy
// machine.
std::string lm_args(const std::string& corpus, int steps) {
  return " --model gpt-tiny --data " + corpus + " --block-size 32 --batch 4 --steps " + std::to_string(steps) +
         " --checkpoint-every 100 --eval-every 0 --threads 1 --seed 3 --progress lines";
}

}  // namespace

// A language model on text: killed mid-epoch after a checkpoint, resumed
// from it, it ends bit-identical to the run that was never stopped (the
// random windows and the AdamW state follow from the step; dropout's
// resume is the ConvNet's case above).
TEST(Resume, LanguageModelKillNineThenResumeIsBitIdentical) {
  const std::string corpus = write_fox_corpus(temp_dir("resume-lm-data"));
  expect_kill_resume_identical(lm_args(corpus, 1500) + " --optimizer adamw", temp_dir("resume-lm-a"),
                               temp_dir("resume-lm-b"), 250, 1500);
}

// The test device whose arenas the host may not address (runtime/device.hpp's
// offset_device, the reference kernels): its checkpoints read the state
// through the device's copies, a run on it killed and resumed ends
// bit-identical to the one never stopped, and both to the same run on the
// reference device whose kernels it runs.
TEST(Resume, OffsetDeviceKillNineThenResumeIsBitIdentical) {
  const std::string corpus = write_fox_corpus(temp_dir("resume-off-data"));
  const std::string args = lm_args(corpus, 600) + " --optimizer adamw";
  const std::string a = temp_dir("resume-off-a"), b = temp_dir("resume-off-b"), ref = temp_dir("resume-off-ref");
  expect_kill_resume_identical(args + " --device reference-offset", a, b, 250, 600);
  RunResult r = run_memfit("train" + args + " --device reference --out " + ref);
  ASSERT_EQ(r.code, 0) << r.out;
  expect_same_run(a, ref);
}

// Update in backward changes when each parameter is updated, not what the
// step computes, and gradients are no checkpoint state: a run with it ends
// bit-identical to one without, and killed and resumed with it, too.
TEST(Resume, UpdateInBackwardIsBitIdenticalAndResumes) {
  const std::string a = temp_dir("resume-uib-a"), b = temp_dir("resume-uib-b"), c = temp_dir("resume-uib-c");
  const std::string uib = kArgs + " --update-in-backward";
  RunResult plain = run_memfit("train" + kArgs + " --out " + a);
  ASSERT_EQ(plain.code, 0) << plain.out;
  RunResult full = run_memfit("train" + uib + " --out " + b);
  ASSERT_EQ(full.code, 0) << full.out;
  EXPECT_NE(full.out.find("update in backward: gradients "), std::string::npos) << full.out;
  expect_same_run(a, b);
  const std::string out = kill_and_resume(uib, c, 30, 40);
  ASSERT_FALSE(HasFailure());
  EXPECT_NE(out.find("at step 20"), std::string::npos) << out;
  expect_same_run(a, c);
}

// Parameters and optimizer state offloaded to a file in the run directory
// (--offload all): the same arithmetic, read in and written back around
// each layer, so the run ends bit-identical to one in memory. The offload
// file is kept and every step commits whole (a step record beside it), so a
// run killed with SIGKILL, wherever it was in its step, resumes from the
// last step it reported or a later one (not from its last checkpoint), and
// ends bit-identical too; a finished run leaves no offload file behind.
TEST(Resume, OffloadedRunIsBitIdenticalAndResumesFromItsLastStep) {
  const std::string a = temp_dir("resume-off-a"), b = temp_dir("resume-off-b"), c = temp_dir("resume-off-c");
  RunResult plain = run_memfit("train" + kArgs + " --out " + a);
  ASSERT_EQ(plain.code, 0) << plain.out;
  auto offload_files = [](const std::string& dir) {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      n += e.path().filename().string().rfind("memfit-offload", 0) == 0;
    return n;
  };
  for (const std::string off : {" --offload all --update-in-backward", " --offload params,state"}) {
    SCOPED_TRACE(off);
    RunResult full = run_memfit("train" + kArgs + off + " --out " + b);
    ASSERT_EQ(full.code, 0) << full.out;
    EXPECT_NE(full.out.find("offload tier (disk)"), std::string::npos) << full.out;
    EXPECT_NE(full.out.find("offload file kept"), std::string::npos) << full.out;
    expect_same_run(a, b);
    EXPECT_EQ(offload_files(b), 0);
    EXPECT_FALSE(std::filesystem::exists(b + "/offload-step.safetensors"));
  }
  const std::string args = kArgs + " --offload all --update-in-backward";
  std::string seen;
  const int killed = run_and_kill("train" + args + " --out " + c, 30, seen);
  ASSERT_GE(killed, 30) << seen;
  ASSERT_LT(killed, 40) << seen;
  EXPECT_EQ(offload_files(c), 1);
  EXPECT_TRUE(std::filesystem::exists(c + "/offload-step.safetensors"));
  // Resumed as it did not run (without --offload): refused, nothing lost.
  RunResult other = run_memfit("train" + kArgs + " --offload none --out " + c + " --resume " + c);
  EXPECT_NE(other.code, 0) << other.out;
  EXPECT_NE(other.out.find("offload-step.safetensors"), std::string::npos) << other.out;
  RunResult res = run_memfit("train" + args + " --out " + c + " --resume " + c);
  ASSERT_EQ(res.code, 0) << res.out;
  int at = -1;
  const size_t pos = res.out.find("step record at step ");
  ASSERT_NE(pos, std::string::npos) << res.out;
  at = std::atoi(res.out.c_str() + pos + std::strlen("step record at step "));
  EXPECT_GE(at, killed) << "resumed from before the last step the killed run reported";
  expect_same_run(a, c);
  EXPECT_EQ(offload_files(c), 0);
}

// Compact optimizer state resumes exactly too: 8-bit codes and their
// scales, bf16 moments (whose stochastic rounding is a function of seed,
// step and element) and Adafactor's factors are stored as they are. A run
// resumed with another --optimizer-state is refused, naming the flag.
TEST(Resume, CompactOptimizerStateResumesBitIdentical) {
  const std::string corpus = write_fox_corpus(temp_dir("resume-state-data"));
  const char* variants[] = {"--optimizer adamw --optimizer-state 8bit", "--optimizer adamw --optimizer-state bf16",
                            "--optimizer sgd --optimizer-state 8bit --lr 0.1", "--optimizer adafactor"};
  for (const char* v : variants) {
    SCOPED_TRACE(v);
    std::string tag = v;
    for (char& c : tag)
      if (c == ' ' || c == '-' || c == '.') c = '_';
    expect_kill_resume_identical(lm_args(corpus, 600) + " " + v, temp_dir("resume-state-a" + tag),
                                 temp_dir("resume-state-b" + tag), 250, 600);
  }
  const std::string dir = temp_dir("resume-state-mismatch");
  const std::string args = lm_args(corpus, 100) + " --optimizer adamw";
  ASSERT_EQ(run_memfit("train" + args + " --optimizer-state 8bit --out " + dir).code, 0);
  RunResult other = run_memfit("train" + args + " --optimizer-state fp32 --out " + dir + " --resume " + dir);
  EXPECT_NE(other.code, 0) << other.out;
  EXPECT_NE(other.out.find("its optimizer state is stored as 8bit, this run's as fp32; pass --optimizer-state 8bit"),
            std::string::npos)
      << other.out;
}
