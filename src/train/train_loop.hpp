// The steps of one allocated plan: accumulation groups, fp16 loss scaling,
// evaluation, metrics, checkpoints, progress, interruption by signal,
// profiling, and the final evaluation and checkpoint.
#pragma once

#include <signal.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <iosfwd>
#include <memory>
#include <optional>
#include <variant>

#include "data/loader.hpp"
#include "kernels/kernel.hpp"
#include "memfit/schedule.hpp"
#include "persist/checkpoint.hpp"
#include "dist/data_parallel.hpp"
#include "train/loss_scaler.hpp"
#include "report/progress.hpp"
#include "report/run_log.hpp"
#include "train/run_plan.hpp"
#include "train/step_io.hpp"
#include "train/trainer.hpp"

namespace memfit::train {

// While one lives (and `enable`), the first SIGINT/SIGTERM is recorded and
// acted on at the next step boundary (TrainLoop stops and checkpoints); a
// second one ends the process at once. The previous handlers come back
// when it goes.
class SignalScope {
 public:
  explicit SignalScope(bool enable);
  ~SignalScope();
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;

 private:
  struct sigaction old_int_ {}, old_term_ {};
  bool on_ = false;
};

// The signal received under a SignalScope, else 0.
int stop_signal();
// Asks the running TrainLoop to stop as on `sig` (finish the step, write a
// checkpoint, return with TrainResult::interrupted = sig), for a host that
// keeps its own signal handlers (the Python package: run_training with
// handle_signals off). Call it on the thread that runs the loop (from its
// log stream) or from a signal handler; every run_training starts with
// no request.
void request_stop(int sig);

class TrainLoop {
 public:
  // p must be allocated (allocate_plan). Initialises the parameters (or
  // loads --init-from), or restores --resume's checkpoint after checking it
  // matches; throws std::runtime_error when it does not, or when the
  // training set is smaller than one batch.
  TrainLoop(RunPlan& p, std::ostream& log);

  // Runs to the last step, a signal, or an injected out-of-memory
  // (Replan: the state after the last finished step is saved, and the run
  // continues from it with half the micro-batch).
  std::variant<TrainResult, Replan> run();

 private:
  using Clock = std::chrono::steady_clock;
  struct EvalResult {
    double loss = 0.0, accuracy = 0.0;
    size_t count = 0;
  };

  RunPlan& p_;
  const TrainOptions& o_;
  std::ostream& log_;
  Executor& ex_;
  data::Loader loader_;
  std::unique_ptr<data::Loader> test_loader_;
  int64_t total_steps_ = 0;
  // The update runs apart from forward and backward when it must wait for
  // the group (accumulation) or for the overflow check (fp16 loss scaling).
  size_t update_node_ = 0;
  Schedule sched_;
  TrainState st_;
  LossScaler scaler_;
  std::unique_ptr<GradientCheck> grads_;  // fp16 only
  StepInputs inputs_;
  StepInputs eval_inputs_;
  EvalMetrics eval_metrics_;
  std::optional<Progress> prog_;  // made after the checkpoint is loaded, as the run starts
  std::ofstream metrics_;
  StepLog steps_;
  TrainResult res_;
  DataParallel dp_;  // several ranks: the gradients' sum and the parameters' exchange
  kernels::StepContext ctx_;
  double loss_sum_ = 0.0, last_loss_ = 0.0;  // loss_sum_: since the last evaluation
  int64_t loss_n_ = 0, images_ = 0;
  int64_t tokens_per_sample_ = 0;  // a language model's window length (else 0)
  double train_seconds_ = 0.0;
  // This process's first optimizer step (kernels' first runs, pages first
  // touched, the loader's first batch): its time and samples, which the
  // warm throughput leaves out. first_seconds_ < 0 until it is done.
  double first_seconds_ = -1.0;
  int64_t first_images_ = 0;
  double comm_seconds_ = 0.0;  // in the ranks' exchange of gradients and parameters
  int64_t group_ = 0;        // micro-batches done in this optimizer step
  double group_loss_ = 0.0;

  void resume();
  void resume_rank();  // data parallel: rank 0 loads, the others take what it loaded
  bool lead() const { return dp_.rank() == 0; }  // writes the run's files and speaks for it
  // One micro-batch of n rows (already in the inputs), and when it ends a
  // group, the update and the step's bookkeeping.
  void run_micro_batch(size_t n, Clock::time_point t0);
  void end_group(Clock::time_point t0);
  Replan injected_oom(size_t n);
  EvalResult evaluate();
  void eval_and_record(uint64_t epoch);
  void checkpoint();
  // A kept offload file (TierStore::kept): the step record after each step
  // (persist/checkpoint.hpp); stale_offload_: an earlier run's kept file in
  // --out, removed once this run has recorded its first step.
  void record_step();
  // After the last checkpoint: the step record and the kept file go (the
  // checkpoint holds the same step).
  void drop_offload_file();
  bool record_steps_ = false;
  std::string stale_offload_;
  void finish(Clock::time_point t_start);
  double images_per_second() const;
};

}  // namespace memfit::train
