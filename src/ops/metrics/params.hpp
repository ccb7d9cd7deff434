// Parameters of the evaluation metrics kernels (ops/metrics/op.cpp),
// shared by the reference and the fast CPU kernel.
#pragma once

#include <cstdint>

namespace memfit::kernels {

// xent_metrics  in: logits[R,C] (f32), labels[R] (i32)
//               out: loss_sum[1], correct[1], count[1] (f32)
//   Rows with label < 0 are skipped. For the others, with m = max_c z_c:
//   loss_sum += log sum_c exp(z_c - m) + m - z_label (NaN if label >= C),
//   correct += (the first c with z_c = m) == label, count += 1.
struct MetricsParams {
  int64_t R, C;
};

}  // namespace memfit::kernels
