#include "fit/budget.hpp"

#include <algorithm>
#include <stdexcept>

#include "base/process.hpp"
#include "fit/cgroup.hpp"
#include "runtime/device.hpp"

namespace memfit::train {

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
  const char* how = std::string(dev.name()) == "cuda" ? "cudaMemGetInfo" : "as the device reports it";
  b.source = "free memory of " + gpu + " (" + how + ", of " + format_bytes(total) + ")";
  return b;
}

}  // namespace memfit::train
