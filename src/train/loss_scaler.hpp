// fp16 dynamic loss scaling. The gradient of the loss enters fp16
// multiplied by the scale; the update divides it out. A step whose
// gradients overflowed (inf/NaN) is skipped and the scale halved (never
// below 1); after kGrowth good steps in a row it doubles (never above
// kMaxScale). The state travels in the checkpoint's metadata as the strings
// loss_scale and loss_scale_good.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "memfit/runtime.hpp"

namespace memfit::train {

class LossScaler {
 public:
  static constexpr int64_t kGrowth = 2000;
  static constexpr double kMaxScale = 16777216.0;

  // enabled (fp16): start at `initial`; otherwise the scale stays 1 and
  // nothing is checkpointed.
  LossScaler(bool enabled, double initial) : enabled_(enabled), scale_(enabled ? initial : 1.0) {}

  bool enabled() const { return enabled_; }
  double scale() const { return scale_; }
  int64_t good_steps() const { return good_; }
  int64_t skipped_steps() const { return skipped_; }

  // After the backward of optimizer step `step`: were its gradients finite?
  // nullopt: run the update. Otherwise the step is skipped, and the line
  // that says so (old and new scale) is returned.
  std::optional<std::string> record(bool finite, int64_t step);

  // The checkpoint's metadata: restore() takes the state when it is there
  // (and scaling is on); save() writes it (when scaling is on).
  void restore(const std::map<std::string, std::string>& extra);
  void save(std::map<std::string, std::string>& extra) const;

 private:
  bool enabled_;
  double scale_;
  int64_t good_ = 0, skipped_ = 0;
};

// Whether the gradients the optimizer update reads are all finite: the
// f32 inputs of the update nodes [update_node, end) that are neither
// parameters nor optimizer state. The executor's device checks them where
// they lie (Device::all_finite), through pointers taken once.
class GradientCheck {
 public:
  GradientCheck(Executor& ex, size_t update_node);
  bool all_finite() const;

 private:
  const Device& dev_;
  std::vector<std::pair<const float*, size_t>> bufs_;  // device pointers of the update's gradients
};

}  // namespace memfit::train
