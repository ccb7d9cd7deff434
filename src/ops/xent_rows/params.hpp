// Parameters of the row-wise cross-entropy kernels (ops/xent_rows/op.cpp),
// shared by the reference and the fast CPU kernels.
#pragma once

#include <cstdint>

namespace memfit::kernels {

// xent_rows      in: logits[R,V], targets[R] (i32)   out: loss[1], lse[R]
// xent_rows_bwd  in: logits[R,V], lse[R], targets[R], dloss[1]
//                out: dlogits[R,V] (may be the logits' buffer)
// R rows, V classes, s = smoothing: q = (1-s) onehot(target) + s/V.
// Rows with target < 0 are padding (not counted, zero gradient); count is
// the number of the others, loss = sum over them of lse - (1-s) z_t - s/V
// sum_c z_c, divided by count (0 if count is 0); dlogits = (exp(z - lse) -
// q) dloss / count. A target >= V makes its row's loss and gradient NaN.
struct XentRowsParams {
  int64_t R, V;
  double smoothing = 0.0;
};

}  // namespace memfit::kernels
