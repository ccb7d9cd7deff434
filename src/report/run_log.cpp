#include "report/run_log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <vector>

#include "base/process.hpp"
#include "fit/report.hpp"
#include "memfit/graph.hpp"
#include "memfit/plan.hpp"

namespace memfit::train {
namespace {

const char* phase_name(Phase p) { return p == Phase::Forward ? "forward" : p == Phase::Backward ? "backward" : "update"; }

// The activations arena over one step: every buffer, the nodes in schedule
// order, and where the live bytes peak. Built as text, one small object at
// a time: a plan of thousands of buffers never becomes a document of
// thousands of heap nodes inside a run.
std::string schedule_text(const Graph& g, const Plan& plan) {
  std::vector<ArenaBuffer> bufs = arena_buffers(g, plan);
  const size_t nn = g.num_nodes();
  std::vector<int64_t> delta(nn + 2, 0);  // live bytes by schedule index, as differences
  for (const ArenaBuffer& b : bufs) {
    delta[static_cast<size_t>(b.first)] += static_cast<int64_t>(b.bytes);
    delta[static_cast<size_t>(b.last) + 1] -= static_cast<int64_t>(b.bytes);
  }
  int64_t live = 0, best = 0;
  size_t at = 0;
  for (size_t k = 0; k <= nn; ++k) {
    live += delta[k];
    if (live > best) best = live, at = k;
  }
  Json head;
  head["arena"] = "activations";
  head["arena_bytes"] = plan.arena_bytes[static_cast<size_t>(Arena::Transient)];
  head["node_count"] = nn;
  head["peak_index"] = at;
  head["peak_live_bytes"] = best;
  head["buffer_count"] = bufs.size();
  if (bufs.size() > kPlanFileMaxBuffers) {
    std::stable_sort(bufs.begin(), bufs.end(), [](const ArenaBuffer& a, const ArenaBuffer& b) { return a.bytes > b.bytes; });
    head["truncated"] = "the " + std::to_string(kPlanFileMaxBuffers) + " largest of " + std::to_string(bufs.size()) +
                        " buffers are listed";
    bufs.resize(kPlanFileMaxBuffers);
  }
  if (nn > kPlanFileMaxNodes)
    head["nodes_truncated"] = "the first " + std::to_string(kPlanFileMaxNodes) + " of " + std::to_string(nn) + " nodes are listed";
  std::string s = json_line(head);
  s.pop_back();  // the closing brace: the lists follow
  s += ",\"nodes\":[";
  for (size_t k = 0; k < std::min(nn, kPlanFileMaxNodes); ++k) {
    const Node& n = g.node(static_cast<NodeId>(k));
    if (k) s += ',';
    s += json_line(Json::array({n.op, n.layer, phase_name(n.phase)}));
  }
  s += "],\"buffers\":[";
  for (size_t i = 0; i < bufs.size(); ++i) {
    const ArenaBuffer& b = bufs[i];
    if (i) s += ',';
    s += json_line({{"value", b.name}, {"op", b.op}, {"layer", b.layer}, {"kind", b.kind},
                    {"offset", b.offset}, {"bytes", b.bytes}, {"first", b.first}, {"last", b.last}});
  }
  return s + "]}";
}

}  // namespace

std::string plan_file_text(const Json& run, const MemoryReport& report, const Budget& budget, const Graph& g,
                           const Plan& plan) {
  Json head;
  head["format"] = "memfit-plan";
  head["version"] = 1;
  head["run"] = run;
  std::string s = json_line(head);
  s.pop_back();
  return s + ",\"report\":" + report_json(report, budget) + ",\"schedule\":" + schedule_text(g, plan) + "}\n";
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  bool ok = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (f && std::fclose(f) != 0) ok = false;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot write " + path);
  }
}

StepLog::~StepLog() {
  if (fd_ >= 0) ::close(fd_);
}

void StepLog::open(const std::string& dir, bool resume) {
  const std::string path = dir + "/steps.jsonl";
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (resume ? O_APPEND : O_TRUNC), 0644);
  if (fd_ < 0) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
}

bool StepLog::due(int64_t step, int64_t last_step) {
  if (step == last_step || step <= 2000) return true;
  return step <= 20000 ? step % 10 == 0 : step % 100 == 0;
}

void StepLog::record(int64_t step, uint64_t epoch, double train_loss, int64_t samples, double seconds,
                     int64_t tokens_per_sample) {
  const double dt = seconds - seconds_;
  const double rate = dt > 0 ? static_cast<double>(samples - samples_) / dt : 0.0;
  samples_ = samples;
  seconds_ = seconds;
  // JSON numbers; a value that is not finite is null (as json_line writes it).
  char loss[32], tokens[64] = "";
  if (std::isfinite(train_loss)) std::snprintf(loss, sizeof loss, "%.9g", train_loss);
  else std::snprintf(loss, sizeof loss, "null");
  if (tokens_per_sample)
    std::snprintf(tokens, sizeof tokens, ",\"tokens_per_second\":%.9g", rate * static_cast<double>(tokens_per_sample));
  char line[400];
  const int n = std::snprintf(line, sizeof line,
                              "{\"step\":%lld,\"epoch\":%llu,\"train_loss\":%s,\"samples_per_second\":%.9g%s,"
                              "\"seconds\":%.9g,\"rss_bytes\":%zu,\"peak_rss_bytes\":%zu}\n",
                              static_cast<long long>(step), static_cast<unsigned long long>(epoch), loss, rate, tokens,
                              seconds, current_rss(), peak_rss());
  if (fd_ < 0 || n <= 0 || static_cast<size_t>(n) >= sizeof line) return;
  const ssize_t written = ::write(fd_, line, static_cast<size_t>(n));
  (void)written;  // a line lost (a full disk) only thins the report; the checkpoint reports the disk
}

}  // namespace memfit::train
