// Where a step's data crosses between the host and an executor: the batch's
// named tensors going in (Executor::feed), the loss and the evaluation
// metrics coming out (Executor::fetch_scalar). Nothing else in train/ moves
// step data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "data/loader.hpp"
#include "memfit/runtime.hpp"
#include "compile/step_graph.hpp"

namespace memfit::train {

// The batch in: each tensor the loader yields is fed to the step input of
// the same name (StepGraph::inputs); a tensor no input takes is skipped.
class StepInputs {
 public:
  // ex must be allocated.
  StepInputs(Executor& ex, const StepGraph& sg);
  // The next batch of `loader` into the inputs; its row count, 0 at the end
  // of an epoch (Loader::next_batch). Throws std::invalid_argument if a
  // tensor's batch does not have its input's size.
  size_t next(data::Loader& loader);

 private:
  Executor& ex_;
  const StepGraph& sg_;
  const data::Loader* bound_ = nullptr;
  std::vector<ValueId> ids_;  // per loader tensor; kNone: not an input
  std::vector<size_t> bytes_;
};

// Evaluation's outputs: the xent_metrics sums of the batch just run
// (StepSpec::with_metrics), added up over batches in double.
class EvalMetrics {
 public:
  EvalMetrics(Executor& ex, const StepGraph& sg);
  void reset() { loss_sum_ = correct_ = count_ = 0.0; }
  void add();  // after a run
  double count() const { return count_; }
  double loss() const { return count_ > 0 ? loss_sum_ / count_ : 0.0; }
  double accuracy() const { return count_ > 0 ? correct_ / count_ : 0.0; }

 private:
  Executor& ex_;
  XentMetrics ids_;
  double loss_sum_ = 0.0, correct_ = 0.0, count_ = 0.0;
};

}  // namespace memfit::train
