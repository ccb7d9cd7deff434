// Row-wise cross-entropy over f32 logits (ops/xent_rows/params.hpp) for
// large vocabularies: rows split statically across threads (OpenMP), each
// row streamed in 16-lane vectors, exp in f32 lanes (kernels/cpu/
// simd_math.hpp), row sums flushed to double.
//  - forward: lse per row (f32) and each row's loss (double) into scratch
//    (R doubles), then summed in row order: the loss does not depend on the
//    thread count.
//  - backward: dlogits = (exp(z - lse) - q) dloss / count in f32, written
//    over the logits when the planner shares their buffer (each vector is
//    read before it is written; the target's logit is read first). No
//    [R, V] scratch.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "ops/xent_rows/params.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_xent_rows(const XentRowsParams& p);
std::unique_ptr<Kernel> make_xent_rows_bwd(const XentRowsParams& p);

}  // namespace memfit::kernels::cpu
