// Memory facts of this process and machine: byte-size parsing, the budget
// (--memory, else the container limit, else available memory, minus a
// margin), and resident set size (current and peak) read from /proc.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace memfit {
class Device;  // runtime/device.hpp
}

namespace memfit::train {

// "512MiB", "1GiB", "1.5G", "300MB", "1000000" -> bytes. Binary units for
// K/M/G/T with or without "iB"; "KB/MB/GB" are decimal. nullopt if malformed.
std::optional<size_t> parse_bytes(const std::string& s);
std::string format_bytes(size_t b);     // "123.4 MiB"
std::string format_bytes_up(size_t b);  // the same, rounded up: never less than b (for budgets to ask for)

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
// or memory.high, v1 memory.limit_in_bytes; see train/cgroup.hpp) less what
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

// VmRSS and VmHWM of this process in bytes (0 if /proc is unreadable).
// Allocation-free: safe to call inside a training step.
size_t current_rss();
size_t peak_rss();
// Resets VmHWM to the current RSS (Linux: writes 5 to /proc/self/clear_refs).
bool reset_peak_rss();

// Fixes glibc's mmap and trim thresholds at 64 KiB. By default glibc raises
// its mmap threshold to the size of the largest mapped block freed so far;
// oneDNN's gemm allocates and frees packing buffers on every call (per
// thread, ~72 KiB to megabytes), so they would move from short-lived
// mappings into the heap and the threads' arenas, fragment them, and make
// RSS creep by megabytes over the first steps: memory no plan can see. With
// fixed thresholds such a buffer is mapped and unmapped per call and the
// heaps stay at what the process keeps live.
void configure_allocator();
// Runs one OpenMP parallel region so that the worker threads (their stacks
// and thread state) exist before the process baseline is measured.
void start_threads();

}  // namespace memfit::train
