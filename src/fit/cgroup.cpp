#include "fit/cgroup.hpp"

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

namespace memfit::train {
namespace {

// v1 reports "no limit" as PAGE_COUNTER_MAX pages (~2^63 rounded to a page);
// anything past 2^60 bytes is no limit.
constexpr unsigned long long kUnlimited = 1ull << 60;

// A byte count from a one-value cgroup file; nullopt for "max", unlimited,
// a missing file or junk.
std::optional<size_t> read_value(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (!(f >> s) || s == "max") return std::nullopt;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (end == s.c_str() || *end || v >= kUnlimited) return std::nullopt;
  return static_cast<size_t>(v);
}

// The value of `key` in a "key value" file (memory.stat); 0 if absent.
size_t stat_field(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  std::string k;
  unsigned long long v = 0;
  while (f >> k >> v)
    if (k == key) return static_cast<size_t>(v);
  return 0;
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape(const std::string& s) {
  std::string o;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      const std::string oct = s.substr(i + 1, 3);
      if (oct.size() == 3 && oct.find_first_not_of("01234567") == std::string::npos) {
        o += static_cast<char>(std::strtol(oct.c_str(), nullptr, 8));
        i += 3;
        continue;
      }
    }
    o += s[i];
  }
  return o;
}

struct Mount {
  std::string root, point;  // the hierarchy's directory the mount shows, and where it is mounted
};

// The mount of the v2 hierarchy (v1 == false) or of the v1 hierarchy that
// carries the memory controller.
std::optional<Mount> find_mount(const std::string& root, bool v1) {
  std::ifstream f(root + "/proc/self/mountinfo");
  std::string line;
  while (std::getline(f, line)) {
    // id parent major:minor root mountpoint options [optional...] - fstype source superoptions
    std::istringstream in(line);
    std::vector<std::string> w;
    for (std::string t; in >> t;) w.push_back(t);
    size_t dash = 0;
    while (dash < w.size() && w[dash] != "-") ++dash;
    if (dash < 5 || dash + 3 >= w.size()) continue;
    const std::string& fstype = w[dash + 1];
    if (v1) {
      if (fstype != "cgroup") continue;
      std::istringstream opts(w[dash + 3]);
      bool memory = false;
      for (std::string o; std::getline(opts, o, ',');) memory |= o == "memory";
      if (!memory) continue;
    } else if (fstype != "cgroup2") {
      continue;
    }
    return Mount{unescape(w[3]), unescape(w[4])};
  }
  return std::nullopt;
}

// The process's cgroup path in the v2 hierarchy or the v1 memory hierarchy.
std::optional<std::string> own_cgroup(const std::string& root, bool v1) {
  std::ifstream f(root + "/proc/self/cgroup");
  std::string line;
  while (std::getline(f, line)) {
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string id = line.substr(0, a), ctrls = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (!v1) {
      if (id == "0" && ctrls.empty()) return path;
      continue;
    }
    std::istringstream in(ctrls);
    for (std::string c; std::getline(in, c, ',');)
      if (c == "memory") return path;
  }
  return std::nullopt;
}

// Walks from the process's cgroup directory up to the mount point.
std::optional<CgroupLimit> walk(const std::string& root, bool v1, size_t own_rss) {
  auto m = find_mount(root, v1);
  auto cg = own_cgroup(root, v1);
  if (!m || !cg) return std::nullopt;
  // The cgroup path is relative to the hierarchy's root; the mount shows
  // the hierarchy from m->root down. A path outside it (another namespace's
  // view) leaves only the mount's own directory to read.
  std::string rel;
  std::string mroot = m->root == "/" ? "" : m->root;
  if (cg->compare(0, mroot.size(), mroot) == 0 && (cg->size() == mroot.size() || (*cg)[mroot.size()] == '/'))
    rel = cg->substr(mroot.size());
  while (!rel.empty() && rel.back() == '/') rel.pop_back();
  std::optional<CgroupLimit> best;
  for (;;) {
    const std::string dir = m->point + rel;
    std::string limit_file = dir + (v1 ? "/memory.limit_in_bytes" : "/memory.max");
    std::optional<size_t> lim = read_value(root + limit_file);
    if (!v1) {
      // memory.high throttles hard above it: as binding as memory.max.
      auto high = read_value(root + dir + "/memory.high");
      if (high && (!lim || *high < *lim)) {
        lim = high;
        limit_file = dir + "/memory.high";
      }
    }
    if (lim) {
      CgroupLimit c;
      c.version = v1 ? 1 : 2;
      c.file = limit_file;
      c.limit = *lim;
      const auto usage = read_value(root + dir + (v1 ? "/memory.usage_in_bytes" : "/memory.current"));
      const size_t cache = stat_field(root + dir + "/memory.stat", v1 ? "total_cache" : "file");
      if (usage && *usage > cache + own_rss) c.others = *usage - cache - own_rss;
      c.swap_limit = SIZE_MAX;
      if (v1) {
        if (auto memsw = read_value(root + dir + "/memory.memsw.limit_in_bytes"))
          c.swap_limit = *memsw > *lim ? *memsw - *lim : 0;
      } else if (auto sw = read_value(root + dir + "/memory.swap.max")) {
        c.swap_limit = *sw;
      }
      if (!best || c.headroom() < best->headroom()) best = c;
    }
    if (rel.empty()) break;
    rel = rel.substr(0, rel.rfind('/'));
  }
  return best;
}

}  // namespace

std::optional<CgroupLimit> cgroup_memory_limit(const std::string& root, size_t own_rss) {
  auto v2 = walk(root, false, own_rss);
  auto v1 = walk(root, true, own_rss);
  if (v1 && (!v2 || v1->headroom() < v2->headroom())) return v1;
  return v2;
}

size_t mem_available(const std::string& root) {
  std::ifstream f(root + "/proc/meminfo");
  std::string key, unit;
  size_t kb = 0;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

}  // namespace memfit::train
