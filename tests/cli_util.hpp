// Running the memfit binary from tests: exit code and combined output
// (json_out.hpp reads the JSON it prints).
#pragma once

#include <sys/wait.h>

#include <array>
#include <cmath>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "json_out.hpp"

namespace memfit::testing {

struct RunResult {
  int code = -1;
  std::string out;
};

inline RunResult run_cmd(const std::string& cmd) {
  RunResult r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int st = ::pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

inline RunResult run_memfit(const std::string& args) { return run_cmd(std::string(MEMFIT_BINARY) + " " + args); }

// Paths removed when the test program exits (its run directories hold
// checkpoints and dataset caches: hundreds of MB a suite run), unless
// MEMFIT_KEEP_TEST_DIRS is set, to look at them after a failure.
inline void remove_at_exit(const std::string& path) {
  struct Registry {
    std::vector<std::string> paths;
    ~Registry() {
      if (std::getenv("MEMFIT_KEEP_TEST_DIRS")) return;
      for (const std::string& p : paths) {
        std::error_code ec;
        std::filesystem::remove_all(p, ec);
      }
    }
  };
  static Registry r;
  r.paths.push_back(path);
}

// A fresh empty directory under the system temp dir, removed at exit.
inline std::string temp_dir(const std::string& tag) {
  namespace fs = std::filesystem;
  fs::path base = fs::temp_directory_path() / ("memfit-test-" + tag + "-" + std::to_string(::getpid()));
  fs::remove_all(base);
  fs::create_directories(base);
  remove_at_exit(base.string());
  return base.string();
}

// A small text corpus for the GPT tests (400 fortunes-style entries) in
// dir/corpus.txt; returns its path.
inline std::string write_fox_corpus(const std::string& dir) {
  std::ofstream f(dir + "/corpus.txt");
  for (int e = 0; e < 400; ++e) f << "entry " << e << ": the quick brown fox " << (e * 7919 % 101) << " jumps.\n%\n";
  return dir + "/corpus.txt";
}

}  // namespace memfit::testing
