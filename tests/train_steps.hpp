// A few training steps on whatever the executor's inputs hold: the loss of
// the first and of the last (tests that a small model learns).
#pragma once

#include <utility>

#include "kernels/kernel.hpp"
#include "memfit/runtime.hpp"

namespace memfit::testing {

inline std::pair<double, double> first_and_last_loss(Executor& ex, ValueId loss, int steps, double lr) {
  kernels::StepContext ctx;
  ctx.lr = lr;
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    ctx.step = step;
    ex.run(ctx);
    last = ex.fetch_scalar(loss);
    if (step == 0) first = last;
  }
  return {first, last};
}

}  // namespace memfit::testing
