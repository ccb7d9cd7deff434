// Learning-rate schedules as pure functions of the optimizer step, so a
// resumed run continues the schedule exactly.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

namespace memfit {

struct Schedule {
  std::string kind = "constant";  // constant | step | cosine
  double base_lr = 0.01;
  int64_t warmup = 0;             // linear warm-up steps from base_lr/warmup
  int64_t total = 1;              // total optimizer steps (cosine)
  int64_t step_every = 0;         // step: decay every this many steps
  double gamma = 0.1;             // step: decay factor
  double min_lr = 0.0;            // cosine floor

  double lr(int64_t step) const {
    if (warmup > 0 && step < warmup) return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
    if (kind == "step" && step_every > 0) return base_lr * std::pow(gamma, static_cast<double>(step / step_every));
    if (kind == "cosine") {
      const double span = static_cast<double>(std::max<int64_t>(1, total - warmup));
      const double t = std::min(1.0, static_cast<double>(step - warmup) / span);
      return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * t));
    }
    return base_lr;
  }
  static bool valid_kind(const std::string& k) { return k == "constant" || k == "step" || k == "cosine"; }
};

}  // namespace memfit
