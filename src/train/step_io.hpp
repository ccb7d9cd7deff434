// Where a step's data crosses between the host and an executor: the batch
// going in, and (evaluation) the logits and labels coming out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "data/loader.hpp"
#include "memfit/runtime.hpp"
#include "train/step_graph.hpp"

namespace memfit::train {

// The batch in. The loader decodes straight into the executor's input and
// label buffers (host-addressable on the CPU); this is the one place that
// does, so that a data layer yielding named tensors can feed them instead.
class StepInputs {
 public:
  // ex must be allocated.
  StepInputs(Executor& ex, const StepGraph& sg);
  // The next batch of `loader` into the inputs; its row count, 0 at the end
  // of an epoch (Loader::next).
  size_t next(data::Loader& loader) { return loader.next(x_, y_); }

 private:
  float* x_;
  int32_t* y_;
};

// Evaluation's outputs: the logits and the labels of the batch just run,
// copied into host buffers made once (batch x classes floats, batch labels).
class EvalOutputs {
 public:
  EvalOutputs(Executor& ex, const StepGraph& sg);
  // Copies the whole batch's logits and labels out of the executor.
  void fetch();
  const float* logits() const { return logits_.data(); }
  const int32_t* labels() const { return labels_.data(); }

 private:
  Executor& ex_;
  ValueId logits_id_, labels_id_;
  std::vector<float> logits_;
  std::vector<int32_t> labels_;
};

}  // namespace memfit::train
