// Threading for the hand-written loops. Below kParallelMin elements of work a
// loop runs on the calling thread (forking a team costs more than it saves).
//
// The choice is made with a plain branch, never an OpenMP `if` clause or
// num_threads(1): libgomp allocates a fresh team structure on the heap for
// every single-thread parallel region (it caches only teams of more than one
// thread), which would put a heap allocation into every training step.
#pragma once

#include <omp.h>

#include <cstdint>

namespace memfit::kernels::cpu {

constexpr int64_t kParallelMin = int64_t(1) << 15;

// True when `work` elements are worth a thread team and there is more than
// one thread to run it.
inline bool use_team(int64_t work) { return work >= kParallelMin && omp_get_max_threads() > 1; }

// f(i) for i in [0, n), statically split across the team when use_team(work).
template <class F>
inline void parallel_for(int64_t n, int64_t work, F&& f) {
  if (use_team(work)) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) f(i);
  } else {
    for (int64_t i = 0; i < n; ++i) f(i);
  }
}

// The same for element-wise bodies, vectorised (iterations independent).
template <class F>
inline void parallel_for_simd(int64_t n, F&& f) {
  if (use_team(n)) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) f(i);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) f(i);
  }
}

// Runs region() on every thread of a team when use_team(work), else once on
// the calling thread; `omp for` loops inside region() are then orphaned and
// run whole on that thread.
template <class F>
inline void parallel_region(int64_t work, F&& region) {
  if (use_team(work)) {
#pragma omp parallel
    region();
  } else {
    region();
  }
}

// Sum over threads of region()'s return value (each thread's partial sum).
template <class F>
inline double parallel_sum(int64_t work, F&& region) {
  if (!use_team(work)) return region();
  double total = 0.0;
#pragma omp parallel reduction(+ : total)
  total += region();
  return total;
}

}  // namespace memfit::kernels::cpu
