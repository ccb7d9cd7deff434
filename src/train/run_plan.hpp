// Planning one attempt of a run, before any arena is allocated: options ->
// datasets and where they live -> step graphs -> executors with deferred
// allocation -> memory report -> does it fit? The answer is a plan to run,
// or the options to plan again with (the fit's choice, a halved
// micro-batch after running out of memory).
#pragma once

#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <variant>

#include "data/loader.hpp"
#include "memfit/runtime.hpp"
#include "train/options.hpp"
#include "fit/report.hpp"
#include "train/run_data.hpp"
#include "compile/step_graph.hpp"
#include "train/trainer.hpp"

namespace memfit::train {

// A run to plan again with other options. Returned, never thrown: the
// attempt that returns it ends, so every arena it took is freed before the
// next plan measures and takes memory.
struct Replan {
  TrainOptions options;
};

struct RunPlan {
  TrainOptions options;  // this attempt's
  Datasets data;
  data::LoaderOptions train_loader, test_loader;
  int64_t classes = 0;
  std::unique_ptr<StepGraph> train_g, eval_g;
  // Deferred allocation: nothing is allocated until allocate_plan().
  std::unique_ptr<Executor> train_ex, eval_ex;
  // Evaluation runs inside the training executor's transient arena (it
  // fits there); it always reads the training parameters in place.
  bool eval_shares = false;
  MemoryReport report;
  Budget budget;
  // A device with memory of its own: its free bytes when the plan was made
  // (after its context; before the arenas), to measure what the run took.
  size_t device_free_at_plan = 0;
};

// Plans an attempt and prints the plan to `log`. A RunPlan when the plan
// fits the budget (or, plan_only with the fit off, whatever it needs);
// Replan with the fit's choice when it does not and the fit is on. Throws
// BudgetError when nothing fits (or the fit is off), std::runtime_error for
// bad data, GraphError for a bad model. The options must be valid
// (validate()).
std::variant<RunPlan, Replan> plan_run(const TrainOptions& o, std::ostream& log);

// Allocates the plan's arenas: the training executor's, then evaluation's
// with the training parameters (and transient arena, when eval_shares)
// borrowed. When memory runs out (or the test seam inject_oom_at_step is 0) it returns
// the options with half the micro-batch, or throws std::runtime_error when
// the micro-batch cannot be halved.
std::optional<Replan> allocate_plan(RunPlan& p, std::ostream& log);

// What a run that stops at its plan returns (and a trained one starts from):
// the report, the budget and the planned peak.
TrainResult planned_result(const RunPlan& p);

// What the fit may plan under a budget: the budget less 2% and 4 MiB of
// slack. The measured baseline (kernel code, library state, the heap an
// earlier attempt left) differs between plans and runs by up to a few MiB:
// 12.5 to 17.0 MiB for gpt-char's plans on one machine.
size_t fit_target(size_t budget);

// The smallest --memory value (in tenths of a MiB, as the refusal prints it)
// under which the fit accepts a plan of `need` bytes, and of up to
// kReplanBytes more: the command run again with that value measures its
// baseline again (tenths of a MiB up or down between processes), so a
// value exactly at the fit's edge would be refused half the time.
constexpr size_t kReplanBytes = size_t(1) << 20;
std::string smallest_memory_flag(size_t need);

}  // namespace memfit::train
