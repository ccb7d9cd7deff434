// The training loop: data, plan, steps, evaluation, metrics, checkpoints,
// exact resume. The only layer that knows about epochs.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <stdexcept>
#include <string>
#include <vector>

#include "train/options.hpp"
#include "fit/report.hpp"

namespace memfit::train {

struct TrainResult {
  int64_t steps = 0;
  int64_t skipped_steps = 0;   // fp16: steps skipped for overflowed gradients
  double loss_scale = 1.0;     // fp16: the loss scale at the end
  double final_train_loss = 0.0;
  bool evaluated = false;
  double test_loss = 0.0, test_accuracy = 0.0;
  double images_per_second = 0.0;  // samples (images, sequences, windows) per second
  double tokens_per_second = 0.0;  // a language model's: target tokens per second (else 0)
  // The first optimizer step this process ran (its kernels' first runs, the
  // loader's first batch), and the throughput of the steps after it (0 with
  // fewer than two steps): what a long run settles at.
  double first_step_seconds = 0.0;
  double warm_images_per_second = 0.0, warm_tokens_per_second = 0.0;
  bool sequences = false;          // the samples are token sequences (a text classifier's)
  double seconds = 0.0;
  size_t peak_rss_bytes = 0;
  size_t planned_peak_bytes = 0;
  // --device cuda: the plan's device memory, and what the device held at
  // the end beyond its free memory when the plan was made (cudaMemGetInfo).
  size_t device_planned_bytes = 0, device_used_bytes = 0;
  size_t budget_bytes = 0;
  MemoryReport report;
  Budget budget;
  int interrupted = 0;         // the signal that stopped the run (SIGINT, SIGTERM), else 0
  // Several ranks: each rank's peak RSS and planned peak, by rank (the
  // fields above are this rank's), and the bytes of gradients and
  // parameters each rank sends per step.
  std::vector<size_t> rank_peak_rss_bytes, rank_planned_peak_bytes;
  size_t comm_bytes_per_step = 0;
  double comm_seconds = 0.0;   // this rank's time in the gradients' and parameters' exchange
  // Gradient buckets per step, and how many of them started while backward
  // still ran (the last step's count).
  size_t comm_buckets = 0, comm_buckets_overlapped = 0;
};

// Thrown when the plan does not fit the budget; the message has the table.
struct BudgetError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Runs a whole training job; progress goes to `log`. Throws
// std::invalid_argument (bad options: validate()), std::runtime_error (bad
// data, bad checkpoint), GraphError (bad model),
// BudgetError (plan over budget, before any arena is allocated).
TrainResult run_training(const TrainOptions& opt, std::ostream& log);

// The result as one JSON line (`memfit train --json`'s last line, and the
// Python package's Run.result): steps, losses, rates, the peak against the
// plan, the ranks' numbers, fp16's loss scale, interrupted, the run directory.
std::string result_json(const TrainResult& r, const TrainOptions& o);

}  // namespace memfit::train
