// Parameters of add_broadcast and sum_leading (ops/broadcast/op.cpp): R
// rows (the product of the leading axes), S elements per row (the
// broadcast operand's size). Dense row-major: row r is [r S, (r + 1) S).
#pragma once

#include <cstdint>

namespace memfit::kernels {

// add_broadcast  in: a[R,S], b[S]   out: y[R,S] = a + b (y may be a's buffer)
// sum_leading    in: x[R,S]         out: y[S] = sum over rows of x
// expand_leading in: x[S]           out: y[R,S], each row x
struct BroadcastParams {
  int64_t R, S;
};

}  // namespace memfit::kernels
