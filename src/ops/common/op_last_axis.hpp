// Shape checks shared by the ops over the last axis of an N-d input
// (layer_norm, softmax) and GELU, and by their backward ops.
#pragma once

#include "ops/common/op_common.hpp"

namespace memfit {

// Rows of input 0 viewed as [R, D], D its last axis; fails unless input 0 is
// a float tensor with a non-empty last axis.
inline int64_t last_axis_rows(const Graph& g, const Node& n) {
  const Shape& x = in_shape(g, n, 0);
  if (x.empty() || x.back() < 1) shape_fail(g, n, n.op + " needs an input with a non-empty last axis");
  if (!is_float(in_dtype(g, n, 0))) shape_fail(g, n, n.op + " needs a float input");
  return numel(x) / x.back();
}

// Fails unless input b has input a's shape and type ("dy must have x's
// shape and type").
inline void expect_like(const Graph& g, const Node& n, size_t b, size_t a, const std::string& what) {
  if (in_shape(g, n, b) != in_shape(g, n, a) || in_dtype(g, n, b) != in_dtype(g, n, a))
    shape_fail(g, n, what + " shape and type");
}

}  // namespace memfit
