// xent_metrics over f32 logits (ops/metrics/params.hpp), rows split
// across threads, exp in f32 lanes (kernels/cpu/simd_math.hpp), each row's
// loss and the totals in double. The totals are added per thread in row
// order and then over threads in thread order: the same result every run
// with the same thread count.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "ops/metrics/params.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_xent_metrics(const MetricsParams& p);

}  // namespace memfit::kernels::cpu
