#include "train/memory.hpp"

#include "train/cgroup.hpp"

#include "runtime/device.hpp"

#include <fcntl.h>
#include <malloc.h>
#include <omp.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace memfit::train {

std::optional<size_t> parse_bytes(const std::string& s) {
  if (s.empty()) return std::nullopt;
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) return std::nullopt;
  char* end = nullptr;
  std::string num = s.substr(0, i);
  double v = std::strtod(num.c_str(), &end);
  if (end != num.c_str() + num.size() || !(v >= 0)) return std::nullopt;
  std::string unit = s.substr(i);
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double mul;
  if (unit.empty() || unit == "b") mul = 1;
  else if (unit == "k" || unit == "kib") mul = 1024.0;
  else if (unit == "m" || unit == "mib") mul = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib") mul = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib") mul = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb") mul = 1e3;
  else if (unit == "mb") mul = 1e6;
  else if (unit == "gb") mul = 1e9;
  else if (unit == "tb") mul = 1e12;
  else return std::nullopt;
  double b = v * mul;
  if (b > 1e18) return std::nullopt;
  return static_cast<size_t>(std::llround(b));
}

std::string format_bytes(size_t b) {
  char buf[64];
  const double d = static_cast<double>(b);
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", d / (1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", d / (1ull << 20));
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", d / 1024);
  else std::snprintf(buf, sizeof buf, "%zu B", b);
  return buf;
}

std::string format_bytes_up(size_t b) {
  char buf[64];
  const double d = static_cast<double>(b);
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", std::ceil(d / (1ull << 30) * 100 - 1e-9) / 100);
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", std::ceil(d / (1ull << 20) * 10 - 1e-9) / 10);
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", std::ceil(d / 1024 * 10 - 1e-9) / 10);
  else std::snprintf(buf, sizeof buf, "%zu B", b);
  return buf;
}

namespace {

// Reads "Key:   123 kB" from /proc/self/status without allocating.
size_t status_field(const char* key) {
  static thread_local char buf[8192];
  int fd = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  const char* p = std::strstr(buf, key);
  if (!p) return 0;
  p += std::strlen(key);
  while (*p == ' ' || *p == '\t' || *p == ':') ++p;
  size_t kb = 0;
  while (*p >= '0' && *p <= '9') kb = kb * 10 + static_cast<size_t>(*p++ - '0');
  return kb * 1024;
}

}  // namespace

Budget detect_budget(std::optional<size_t> flag, const std::string& root) {
  Budget b;
  if (flag) {
    b.bytes = b.limit = *flag;
    b.source = "--memory";
    return b;
  }
  const size_t own = root.empty() ? current_rss() : 0;
  if (auto c = cgroup_memory_limit(root, own)) {
    b.limit = c->limit;
    b.others = c->others;
    b.swap_limit = c->swap_limit;
    b.source = "cgroup v" + std::to_string(c->version) + " " + c->file;
  } else {
    b.limit = mem_available(root);
    b.source = "MemAvailable";
  }
  b.margin = std::min<size_t>(b.limit / 10, 128ull << 20);
  const size_t taken = b.margin + b.others;
  b.bytes = b.limit > taken ? b.limit - taken : 0;
  return b;
}

std::string Budget::describe() const {
  if (source == "--memory" || source == "--device-memory") return source;
  std::string s = source;
  if (others) s += " less " + format_bytes(others) + " used by other processes in it";
  if (margin) s += " minus margin";
  return s;
}

Budget device_budget(const Device& dev, std::optional<size_t> flag) {
  size_t free = 0, total = 0;
  if (!dev.memory_info(free, total))
    throw std::runtime_error(std::string("device '") + dev.name() + "' reports no memory of its own");
  const std::string gpu = dev.info().model;
  Budget b;
  if (flag) {
    if (*flag > free)
      throw std::runtime_error("--device-memory " + format_bytes(*flag) + " is more than the " + format_bytes(free) +
                               " free on " + gpu + " (of " + format_bytes(total) + ")");
    b.bytes = b.limit = *flag;
    b.source = "--device-memory";
    return b;
  }
  b.limit = free;
  b.margin = std::min(free, free / 50 + (size_t(32) << 20));
  b.bytes = free - b.margin;
  b.source = "free memory of " + gpu + " (cudaMemGetInfo, of " + format_bytes(total) + ")";
  return b;
}

size_t current_rss() { return status_field("VmRSS"); }
size_t peak_rss() { return status_field("VmHWM"); }

bool reset_peak_rss() {
  int fd = ::open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::write(fd, "5", 1) == 1;
  ::close(fd);
  return ok;
}

void configure_allocator() {
  constexpr int kThreshold = 64 << 10;
  mallopt(M_MMAP_THRESHOLD, kThreshold);
  mallopt(M_TRIM_THRESHOLD, kThreshold);
}

void start_threads() {
#pragma omp parallel
  {
    volatile char touch[4096];
    touch[0] = static_cast<char>(omp_get_thread_num());
    (void)touch[0];
  }
}

}  // namespace memfit::train
