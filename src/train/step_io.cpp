#include "train/step_io.hpp"

namespace memfit::train {

StepInputs::StepInputs(Executor& ex, const StepGraph& sg)
    : x_(ex.ptr<float>(sg.x)), y_(ex.ptr<int32_t>(sg.labels)) {}

EvalOutputs::EvalOutputs(Executor& ex, const StepGraph& sg)
    : ex_(ex),
      logits_id_(sg.logits),
      labels_id_(sg.labels),
      logits_(static_cast<size_t>(numel(ex.graph().value(sg.logits).shape))),
      labels_(static_cast<size_t>(numel(ex.graph().value(sg.labels).shape))) {}

// Sized by element count: logits stored in another type than f32 make fetch
// throw (naming the value) rather than be read wrongly.
void EvalOutputs::fetch() {
  ex_.fetch(logits_id_, logits_.data(), logits_.size() * sizeof(float));
  ex_.fetch(labels_id_, labels_.data(), labels_.size() * sizeof(int32_t));
}

}  // namespace memfit::train
