// The memory limit of this process's own cgroup, as the kernel enforces it.
//
// /proc/self/cgroup names the process's cgroup in each hierarchy (v1: the
// line whose controllers include "memory"; v2: the "0::" line), and
// /proc/self/mountinfo says where each hierarchy is mounted and which of its
// directories the mount shows (a container sees its own cgroup as the root
// of the mount). From the process's cgroup up to the mount's root, every
// level's limit applies; the smallest one, less what other processes of
// that cgroup hold, is what this process can still get.
//
// Every path is read under `root` ("" for the real system), so that a test
// can hand it a fake tree: root/proc/self/cgroup, root/proc/self/mountinfo,
// root/sys/fs/cgroup/...
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace memfit::train {

struct CgroupLimit {
  int version = 0;          // 1 or 2
  std::string file;         // the limit file that binds, as the system names it (without `root`)
  size_t limit = 0;         // its value in bytes
  size_t others = 0;        // that cgroup's usage not counting page cache and this process's RSS
  size_t swap_limit = 0;    // swap the cgroup allows (v2 memory.swap.max, v1 memsw - limit); SIZE_MAX: unlimited
  size_t headroom() const { return limit > others ? limit - others : 0; }
};

// The tightest memory limit over the process's cgroup and its ancestors, in
// v1 and v2 hierarchies alike (both are read on hybrid systems; the smaller
// wins). v1 "unlimited" (a number near 2^63) and v2 "max" mean no limit.
// `own_rss` is subtracted from the cgroup's usage to find the others' share.
// nullopt when no cgroup sets a limit.
std::optional<CgroupLimit> cgroup_memory_limit(const std::string& root, size_t own_rss);

// MemAvailable from root/proc/meminfo (0 if unreadable).
size_t mem_available(const std::string& root);

}  // namespace memfit::train
