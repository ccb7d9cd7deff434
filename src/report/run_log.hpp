// What a training run writes for its report (run_report.hpp), next to its
// checkpoints and metrics.jsonl: plan.json at the start (the run's header,
// the plan report and the activations arena's planned schedule) and
// steps.jsonl as it goes (one line per logged optimizer step). Both are
// small and bounded; both are written outside the step's arena execution.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/json.hpp"
#include "memfit/graph.hpp"
#include "memfit/plan.hpp"

namespace memfit::train {

struct MemoryReport;
struct Budget;

// plan.json holds at most this many arena buffers (the largest, when a
// plan has more) and this many schedule nodes, and says so when it is cut.
constexpr size_t kPlanFileMaxBuffers = 20000;
constexpr size_t kPlanFileMaxNodes = 20000;

// The plan file, one JSON object on one line: {"format": "memfit-plan",
// "version": 1, "run": {...}, "report": report_json's object, "schedule":
// {"arena_bytes", "node_count", "peak_index", "peak_live_bytes",
// "buffer_count", "nodes": [[op, layer, phase], ...], "buffers": [{value,
// op, layer, kind, offset, bytes, first, last}, ...]}}.
// `run`: the run's header (the trainer's: model, data, policy, start time).
std::string plan_file_text(const Json& run, const MemoryReport& report, const Budget& budget, const Graph& g,
                           const Plan& plan);
// Writes `text` to `path` through a temporary file in the same folder and
// a rename, so that a reader never sees half of it. Throws
// std::runtime_error naming the path when it cannot.
void write_file_atomically(const std::string& path, const std::string& text);

// steps.jsonl: one line per logged optimizer step. Every step is logged up
// to step 2000, every 10th up to 20000, every 100th after, and always the
// run's last step: 100k steps make under 5,000 lines (< 1 MB). A line is
// formatted on the stack and written with one write(2): logging a step
// allocates nothing and holds no stream buffer.
class StepLog {
 public:
  StepLog() = default;
  ~StepLog();
  StepLog(const StepLog&) = delete;
  StepLog& operator=(const StepLog&) = delete;
  // A fresh run starts the file; a resumed one continues it (the report
  // reads a step that is not after the line before it as the run starting
  // over from there: a resume from an earlier checkpoint).
  void open(const std::string& dir, bool resume);
  static bool due(int64_t step, int64_t last_step);
  // `samples` and `seconds`: this attempt's totals so far (the rate is taken
  // over the steps since the previous line); tokens_per_sample 0 unless a
  // language model's.
  void record(int64_t step, uint64_t epoch, double train_loss, int64_t samples, double seconds,
              int64_t tokens_per_sample);

 private:
  int fd_ = -1;
  int64_t samples_ = 0;
  double seconds_ = 0.0;
};

}  // namespace memfit::train
