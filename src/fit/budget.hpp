// The memory budget a plan must fit in: --memory, else the container's
// limit, else available memory, minus a margin; or a device's own memory.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "base/bytes.hpp"

namespace memfit {
class Device;  // runtime/device.hpp
}

namespace memfit::train {

struct Budget {
  size_t bytes = 0;         // what the plan must fit in
  size_t limit = 0;         // the limit before the margin
  size_t margin = 0;
  size_t others = 0;        // cgroup: what other processes in it hold (not page cache)
  size_t swap_limit = 0;    // cgroup: swap it allows (SIZE_MAX: unlimited); never part of the budget
  std::string source;       // "--memory", "cgroup v2 /sys/fs/cgroup/x/memory.max", "MemAvailable"
  // The source as the plan prints it: "cgroup v1 /sys/.../memory.limit_in_bytes minus margin".
  std::string describe() const;
};
// When `flag` is set it is the budget as given (no margin). Otherwise the
// tightest limit of this process's cgroup and its ancestors (v2 memory.max
// or memory.high, v1 memory.limit_in_bytes; see fit/cgroup.hpp) less what
// other processes in that cgroup hold, else MemAvailable; minus a margin of
// 10% capped at 128 MiB, for what memfit cannot plan (the kernel's page
// tables, allocator slack). Swap never counts: a run that swaps crawls.
// Files are read under `root` ("" for this system; tests pass a fake tree).
Budget detect_budget(std::optional<size_t> flag, const std::string& root = "");

// The budget of a device with memory of its own (a GPU, whose
// memory_info answers): `flag` (--device-memory) as given, checked against
// the device's free memory; otherwise its free memory now (after the CUDA
// context and the libraries' handles took theirs) minus a margin of 2%
// plus 32 MiB for what the plan cannot see (the arenas' rounding to the
// driver's pages, kernel code loaded at the first launch). Throws
// std::runtime_error if the device reports no memory or the flag asks for
// more than is free.
Budget device_budget(const Device& dev, std::optional<size_t> flag);

}  // namespace memfit::train
