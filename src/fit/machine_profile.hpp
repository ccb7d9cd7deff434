// The machine's measured speed, which the fit's step-time estimate scales
// from: the device's sustained product rate with the run's threads.
//
// Measured once per machine and kept in the cache directory (--cache-dir), in
// its folder machine/,
// keyed by the device, the processor, the kernel library's version and
// instruction set, memfit's own loops' target and the thread count: a change
// of any of them measures again. So the estimate a user reads, and the
// ranking of the fit's candidates, do not follow the load of the moment; the
// measurement itself is made to hold under load too (ops/conv/cpu.hpp).
#pragma once

#include <string>

#include "runtime/device.hpp"

namespace memfit::train {

struct MachineProfile {
  double flops_per_second = 0;  // sustained product FLOP/s; 0 = unknown
  std::string source;           // "measured", "cached", or "none" (the device has no measurement)
  std::string path;             // the cache file ("" when none was read or written)
};

// The profile of `dev` with `threads` threads (the process's OpenMP threads
// are set to them already): read from `cache_dir` ("" = the default cache
// directory) when a profile with this key is there, else measured and
// written there (atomically). A cache that cannot be read or written is
// measured around, never an error.
MachineProfile machine_profile(const Device& dev, int threads, const std::string& cache_dir);

// The device's tuning (Device::tuning: a GPU's measured convolution
// algorithms), kept beside the profile in machine/ under the same kind of
// key: adopt_device_tuning before a plan's kernels are made, so every run on
// the machine computes with the same choices (and a resumed run gives the
// bits of an uninterrupted one); save_device_tuning after, adding what was
// measured. A cache that cannot be read or written is no error.
void adopt_device_tuning(const Device& dev, const std::string& cache_dir);
void save_device_tuning(const Device& dev, const std::string& cache_dir);

}  // namespace memfit::train
