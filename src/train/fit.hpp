// Automatic fit: when a run's plan exceeds the budget, search micro-batch
// (with gradient accumulation keeping the effective batch) and
// recomputation for the fastest predicted plan that fits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memfit/runtime.hpp"
#include "train/step_graph.hpp"

namespace memfit::train {

struct FitCandidate {
  int64_t micro = 0, accumulate = 1;
  std::string recompute = "none";
  size_t total_bytes = 0;        // predicted peak of the whole process
  double step_flops = 0;         // per optimizer step, recomputation included
  double predicted_seconds = 0;  // cost model, per optimizer step
  std::string describe() const;
};

struct FitResult {
  std::vector<FitCandidate> fitting;  // fastest first
  FitCandidate smallest;              // the least memory of all candidates tried
};

// Predicted time of one optimizer step: FLOPs at an efficiency that falls
// for small micro-batches, plus a fixed cost per node run. A model for
// ranking plans, not a promise.
double predict_step_seconds(double flops_per_micro, int64_t micro, int64_t accumulate, size_t nodes);

// base: the run's step spec (its batch is the effective batch).
// fixed_bytes: what does not depend on the plan (baseline, data pipeline).
FitResult search_fit(const StepSpec& base, int64_t batch, size_t fixed_bytes, size_t budget, const ExecConfig& cfg);

}  // namespace memfit::train
