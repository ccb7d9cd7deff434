// Ctrl-C and SIGTERM never lose more than the current step: the trainer
// finishes the step, writes a checkpoint, says where it is and how to
// resume, and exits 130 / 143. Resuming with the printed command reaches the
// same final weights as a run that was never stopped. --resume takes the
// data options from the checkpoint when they are not given, and names the
// flag when they conflict.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>

#include "cli_util.hpp"
#include "same_tensors.hpp"
#include "io/safetensors.hpp"
#include "persist/checkpoint.hpp"

using namespace memfit::testing;

using memfit::testing::expect_same_tensors;

namespace {

const std::string kArgs = " --subset 1280 --test-subset 256 --epochs 2 --batch 64 --threads 2 --seed 7 --progress lines";

struct Stopped {
  int exit_code = -1;  // -1: killed by a signal
  int signalled_at = -1;
  std::string out;
};

// Starts memfit, reads its output until it reports step >= at, sends `sig`,
// and reads the rest of the output until it exits.
Stopped run_and_signal(const std::string& args, int at, int sig) {
  Stopped r;
  int fds[2];
  if (::pipe(fds) != 0) return r;
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
  while (::read(fds[0], &c, 1) == 1) {
    if (c != '\n') {
      line += c;
      continue;
    }
    r.out += line + "\n";
    int step = 0, total = 0;
    if (r.signalled_at < 0 && std::sscanf(line.c_str(), "step %d/%d", &step, &total) == 2 && step >= at) {
      ::kill(pid, sig);
      r.signalled_at = step;
    }
    line.clear();
  }
  r.out += line;
  ::close(fds[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  if (WIFEXITED(st)) r.exit_code = WEXITSTATUS(st);
  return r;
}

}  // namespace

TEST(Interrupt, CtrlCWritesACheckpointAndTheResumeCommandFinishesTheSameRun) {
  const std::string a = temp_dir("int-a"), b = temp_dir("int-b");
  RunResult full = run_memfit("train" + kArgs + " --out " + a);
  ASSERT_EQ(full.code, 0) << full.out;

  // 1280 / 64 = 20 steps per epoch: interrupt in the second epoch.
  Stopped s = run_and_signal("train" + kArgs + " --out " + b, 24, SIGINT);
  ASSERT_GE(s.signalled_at, 24) << "the run ended before it could be interrupted:\n" << s.out;
  EXPECT_EQ(s.exit_code, 130) << s.out;
  const std::string key = "memfit: interrupted at step ";
  const size_t at = s.out.find(key);
  ASSERT_NE(at, std::string::npos) << s.out;
  const int step = std::atoi(s.out.c_str() + at + key.size());
  EXPECT_GE(step, s.signalled_at) << "the step in progress is finished";
  EXPECT_LE(step, s.signalled_at + 2) << "and no more than that (the signal arrives within a step or two)";
  EXPECT_NE(s.out.find("; checkpoint written to " + b + "; resume with: memfit train --resume " + b), std::string::npos)
      << s.out;
  EXPECT_EQ(s.out.find("eval step", s.out.find("step " + std::to_string(s.signalled_at) + "/")), std::string::npos)
      << "no evaluation after the signal:\n" << s.out;
  auto meta = memfit::train::checkpoint_metadata(b);
  ASSERT_EQ(meta["step"], std::to_string(step)) << "the checkpoint holds the step the message names";

  // The printed command, run as printed (with this build's binary).
  const size_t cmd = s.out.find("resume with: memfit ", at);
  ASSERT_NE(cmd, std::string::npos);
  const std::string resume_args = s.out.substr(cmd + 20, s.out.find('\n', cmd) - cmd - 20);
  RunResult res = run_memfit(resume_args);
  ASSERT_EQ(res.code, 0) << resume_args << "\n" << res.out;
  EXPECT_NE(res.out.find("resumed from " + b + " at step " + std::to_string(step)), std::string::npos) << res.out;
  expect_same_tensors(a + "/model.safetensors", b + "/model.safetensors");
  expect_same_tensors(a + "/checkpoint.safetensors", b + "/checkpoint.safetensors");
}

TEST(Interrupt, SigtermExits143WithACheckpoint) {
  const std::string d = temp_dir("int-term");
  Stopped s = run_and_signal("train" + kArgs + " --out " + d, 4, SIGTERM);
  ASSERT_GE(s.signalled_at, 4) << s.out;
  EXPECT_EQ(s.exit_code, 143) << s.out;
  EXPECT_NE(s.out.find("memfit: interrupted at step "), std::string::npos) << s.out;
  auto meta = memfit::train::checkpoint_metadata(d);
  ASSERT_FALSE(meta["step"].empty());
  EXPECT_GE(std::stoi(meta["step"]), 4);
}

// With --json a tool reads the interruption from stdout too: one object
// with the step, the signal, the checkpoint and the command that resumes.
TEST(Interrupt, JsonRunReportsTheInterruption) {
  const std::string d = temp_dir("int-json");
  Stopped s = run_and_signal("train" + kArgs + " --json --out " + d, 4, SIGTERM);
  ASSERT_GE(s.signalled_at, 4) << s.out;
  EXPECT_EQ(s.exit_code, 143) << s.out;
  const memfit::testing::Json j = memfit::testing::last_json(s.out, "{\"steps\"");
  ASSERT_FALSE(j.empty()) << s.out;
  auto meta = memfit::train::checkpoint_metadata(d);
  ASSERT_FALSE(meta["step"].empty());
  EXPECT_EQ(j.value("steps", -1), std::stoll(meta["step"])) << j;
  EXPECT_EQ(j.value("interrupted", false), true) << j;
  EXPECT_EQ(j.value("signal", 0), 15) << j;
  EXPECT_EQ(j.value("checkpoint", ""), d + "/checkpoint.safetensors") << j;
  EXPECT_EQ(j.value("resume", "").rfind("memfit train --resume " + d, 0), 0u) << j;
}

TEST(Interrupt, ResumeTakesTheDataOptionsFromTheCheckpoint) {
  // The README's example: a --subset run resumed with only --resume and --epochs.
  const std::string d = temp_dir("int-subset");
  const std::string base = " --batch 64 --threads 2 --progress lines --test-subset 64";
  RunResult first = run_memfit("train --subset 256 --epochs 1 --out " + d + base);
  ASSERT_EQ(first.code, 0) << first.out;
  RunResult more = run_memfit("train --resume " + d + " --epochs 2" + base);
  ASSERT_EQ(more.code, 0) << more.out;
  EXPECT_NE(more.out.find("resuming with the checkpoint's data options: --subset 256"), std::string::npos) << more.out;
  EXPECT_NE(more.out.find("done: 8 steps"), std::string::npos) << more.out;

  // A conflicting value names the flag and the value to pass.
  RunResult bad = run_memfit("train --resume " + d + " --epochs 3 --subset 512" + base);
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_NE(bad.out.find("it was trained with --subset 256, this run has --subset 512; pass --subset 256"),
            std::string::npos)
      << bad.out;
}
