#include "train/step_io.hpp"

#include <stdexcept>

namespace memfit::train {

StepInputs::StepInputs(Executor& ex, const StepGraph& sg) : ex_(ex), sg_(sg) {}

size_t StepInputs::next(data::Loader& loader) {
  if (bound_ != &loader) {
    // Which input each of this loader's tensors goes to (made once per
    // loader; the step graph's inputs were taken from the same tensors).
    ids_.assign(loader.tensors().size(), kNone);
    bytes_.assign(loader.tensors().size(), 0);
    for (size_t k = 0; k < ids_.size(); ++k) {
      bytes_[k] = loader.batch_size() * loader.tensors()[k].sample_bytes();
      for (const StepInput& in : sg_.inputs)
        if (in.spec.name == loader.tensors()[k].name) ids_[k] = in.value;
    }
    for (const StepInput& in : sg_.inputs) {
      bool fed = false;
      for (ValueId v : ids_) fed = fed || v == in.value;
      if (!fed) throw std::invalid_argument("the data yields no tensor '" + in.spec.name + "' for the step's input");
    }
    bound_ = &loader;
  }
  const data::Loader::Batch& b = loader.next_batch();
  if (b.n == 0) return 0;
  for (size_t k = 0; k < ids_.size(); ++k)
    if (ids_[k] != kNone) ex_.feed(ids_[k], b.data[k], bytes_[k]);
  return b.n;
}

EvalMetrics::EvalMetrics(Executor& ex, const StepGraph& sg) : ex_(ex), ids_(sg.metrics) {
  if (ids_.loss_sum == kNone) throw std::logic_error("the evaluation graph has no metrics (StepSpec::with_metrics)");
}

void EvalMetrics::add() {
  loss_sum_ += ex_.fetch_scalar(ids_.loss_sum);
  correct_ += ex_.fetch_scalar(ids_.correct);
  count_ += ex_.fetch_scalar(ids_.count);
}

}  // namespace memfit::train
