// Runs the memfit binary as a child process and reports its exit status,
// its output and its own peak resident set size (from wait4, so measured
// from outside the process). json_out.hpp reads the JSON it prints.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "json_out.hpp"

namespace memfit::testing {

struct ChildResult {
  int exit_code = -1;        // -1: did not exit normally
  std::string out, err;      // stdout, stderr
  size_t max_rss_bytes = 0;  // the child's peak RSS (ru_maxrss)
};

inline ChildResult run_memfit(const std::vector<std::string>& args) {
  static int counter = 0;
  const std::string base = "/tmp/memfit-test-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
  const std::string out_path = base + ".out", err_path = base + ".err";
  std::vector<std::string> all{MEMFIT_BINARY};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ChildResult r;
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) {
    posix_spawn_file_actions_destroy(&fa);
    r.err = std::string("cannot start ") + argv[0];
    return r;
  }
  posix_spawn_file_actions_destroy(&fa);
  int status = 0;
  struct rusage ru {};
  wait4(pid, &status, 0, &ru);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.max_rss_bytes = static_cast<size_t>(ru.ru_maxrss) * 1024;
  auto slurp = [](const std::string& p) {
    std::ifstream f(p);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  };
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  std::remove(out_path.c_str());
  std::remove(err_path.c_str());
  return r;
}

}  // namespace memfit::testing
