// Running the memfit binary from tests: exit code and combined output.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cmath>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

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

// A fresh empty directory under the system temp dir.
inline std::string temp_dir(const std::string& tag) {
  namespace fs = std::filesystem;
  fs::path base = fs::temp_directory_path() / ("memfit-test-" + tag + "-" + std::to_string(::getpid()));
  fs::remove_all(base);
  fs::create_directories(base);
  return base.string();
}

// The value of "key": <number> in a one-line JSON object (the last line of
// `memfit train --json`). NaN if absent.
inline double json_field(const std::string& out, const std::string& key) {
  size_t line = out.rfind("{\"steps\"");
  if (line == std::string::npos) return std::nan("");
  size_t k = out.find("\"" + key + "\": ", line);
  if (k == std::string::npos) return std::nan("");
  return std::strtod(out.c_str() + k + key.size() + 4, nullptr);
}

// The number after "key": in the last line of `out` that starts with '{'
// (any JSON object memfit prints). NaN if absent.
inline double json_number(const std::string& out, const std::string& key) {
  size_t line = out.rfind("\n{");
  line = line == std::string::npos ? 0 : line + 1;
  size_t k = out.find("\"" + key + "\": ", line);
  if (k == std::string::npos) return std::nan("");
  return std::strtod(out.c_str() + k + key.size() + 4, nullptr);
}

// The string value of "key" in the last JSON line of `out` ("" if absent;
// escapes are kept as they are).
inline std::string json_string_field(const std::string& out, const std::string& key) {
  size_t line = out.rfind("\n{");
  line = line == std::string::npos ? 0 : line + 1;
  size_t k = out.find("\"" + key + "\": \"", line);
  if (k == std::string::npos) return "";
  const size_t v = k + key.size() + 5;
  size_t e = v;
  while (e < out.size() && out[e] != '"') e += out[e] == '\\' ? 2 : 1;
  return out.substr(v, e - v);
}

}  // namespace memfit::testing
