// Parameter structs of the elementwise ops and fill: plain data shared by the scalar
// reference kernels (ops/eltwise/ref.hpp) and the fast CPU kernels
// (ops/eltwise/cpu.hpp); the lowerings fill them from a graph node.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace memfit::kernels {

// relu      in: x      out: y
// relu_bwd  in: y, dy  out: dx = dy * (y > 0)
// add       in: a, b   out: a + b
// scale     in: x      out: alpha * x
struct EltwiseParams {
  int64_t n;
  double alpha = 1.0;
};

// fill  out: y[n] = value (e.g. the seed gradient 1 of the loss)
struct FillParams {
  int64_t n;
  double value;
};

}  // namespace memfit::kernels
