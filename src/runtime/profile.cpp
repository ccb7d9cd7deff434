// The profile table: where the timed steps of an executor went, per op kind
// (with the kernel that ran it) and per layer (forward and backward apart).
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "memfit/runtime.hpp"

namespace memfit {
namespace {

std::string line(const char* fmt, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

}  // namespace

std::string profile_report(const Executor& ex, const std::vector<double>& t, int64_t steps) {
  const Graph& g = ex.graph();
  if (t.empty() || steps <= 0) return "profile: no steps were timed\n";
  const double per = 1.0 / static_cast<double>(steps);

  struct Kind {
    double s = 0;
    int calls = 0;
  };
  struct Layer {
    double fwd = 0, bwd = 0, other = 0;
  };
  std::map<std::pair<std::string, std::string>, Kind> kinds;
  std::map<std::string, Layer> layers;
  double total = 0;
  for (size_t k = 0; k < t.size(); ++k) {
    const Node& n = g.node(static_cast<NodeId>(k));
    const char* kn = ex.kernel_name(k);
    if (!*kn) continue;
    Kind& kd = kinds[{n.op, kn}];
    kd.s += t[k];
    ++kd.calls;
    Layer& l = layers[n.layer.empty() ? "(" + n.op + ")" : n.layer];
    if (n.phase == Phase::Forward) l.fwd += t[k];
    else if (n.phase == Phase::Backward) l.bwd += t[k];
    else l.other += t[k];
    total += t[k];
  }
  auto ms = [&](double s) { return 1e3 * s * per; };
  auto pct = [&](double s) { return total > 0 ? 100.0 * s / total : 0.0; };

  std::string r = line("profile: %lld steps, %.2f ms per step in kernels\n", static_cast<long long>(steps), ms(total));
  std::vector<std::pair<double, const std::pair<std::string, std::string>*>> ks;
  for (auto& [key, kd] : kinds) ks.push_back({kd.s, &key});
  std::sort(ks.begin(), ks.end(), [](auto& a, auto& b) { return a.first > b.first; });
  r += line("  %-22s %-28s %6s %11s %7s\n", "op", "kernel", "calls", "ms/step", "share");
  for (auto& [s, key] : ks)
    r += line("  %-22s %-28s %6d %11.3f %6.1f%%\n", key->first.c_str(), key->second.c_str(), kinds[*key].calls,
              ms(s), pct(s));

  std::vector<std::pair<double, const std::string*>> ls;
  for (auto& [name, l] : layers) ls.push_back({l.fwd + l.bwd + l.other, &name});
  std::sort(ls.begin(), ls.end(), [](auto& a, auto& b) { return a.first > b.first; });
  r += line("  %-34s %11s %11s %11s %7s\n", "layer", "fwd ms", "bwd ms", "other ms", "share");
  for (auto& [s, name] : ls) {
    const Layer& l = layers[*name];
    r += line("  %-34s %11.3f %11.3f %11.3f %6.1f%%\n", name->c_str(), ms(l.fwd), ms(l.bwd), ms(l.other), pct(s));
  }
  return r;
}

}  // namespace memfit
