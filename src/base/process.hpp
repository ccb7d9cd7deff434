// Memory facts of this process, read from /proc, and the set-up that makes
// them steady: resident set size (current and peak), the allocator's
// thresholds, the worker threads started before the baseline is measured.
#pragma once

#include <cstddef>
#include <functional>

namespace memfit::train {

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

// Runs f on a thread of its own whose OpenMP parallel regions take `threads`
// threads, and returns when it is done (rethrowing what it threw). The
// caller's thread count, and every other thread's, stays as it was: a
// measurement on one thread changes nothing the run set for the process.
void run_with_threads(int threads, const std::function<void()>& f);

}  // namespace memfit::train
