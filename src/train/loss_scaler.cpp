#include "train/loss_scaler.hpp"

#include <algorithm>
#include <cmath>

#include "runtime/device.hpp"
#include "train/options.hpp"

namespace memfit::train {

std::optional<std::string> LossScaler::record(bool finite, int64_t step) {
  if (finite) {
    if (++good_ == kGrowth) {
      good_ = 0;
      scale_ = std::min(scale_ * 2, kMaxScale);
    }
    return std::nullopt;
  }
  ++skipped_;
  good_ = 0;
  const double next = std::max(1.0, scale_ / 2);
  std::string line = "fp16: gradients overflowed at step " + std::to_string(step) + " with loss scale " +
                     short_num(scale_) + "; step skipped, loss scale -> " + short_num(next);
  scale_ = next;
  return line;
}

void LossScaler::restore(const std::map<std::string, std::string>& extra) {
  if (!enabled_) return;
  auto s = extra.find("loss_scale");
  if (s == extra.end()) return;
  auto g = extra.find("loss_scale_good");
  scale_ = std::stod(s->second);
  good_ = std::stoll(g == extra.end() ? std::string() : g->second);
}

void LossScaler::save(std::map<std::string, std::string>& extra) const {
  if (!enabled_) return;
  extra["loss_scale"] = short_num(scale_);
  extra["loss_scale_good"] = std::to_string(good_);
}

GradientCheck::GradientCheck(Executor& ex, size_t update_node) : dev_(ex.device()) {
  const Graph& g = ex.graph();
  for (size_t k = update_node; k < g.num_nodes(); ++k)
    for (ValueId v : g.node(static_cast<NodeId>(k)).inputs) {
      const Value& val = g.value(v);
      if (val.dtype == DType::f32 && val.cls != VClass::Param && val.cls != VClass::OptState)
        bufs_.emplace_back(ex.ptr<float>(v), static_cast<size_t>(numel(val.shape)));
    }
}

bool GradientCheck::all_finite() const { return dev_.all_finite(bufs_); }

}  // namespace memfit::train
