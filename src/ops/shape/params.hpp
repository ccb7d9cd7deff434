// Parameter structs of concat and slice: plain data shared by the scalar
// reference kernels (ops/shape/ref.hpp) and the fast CPU kernels
// (ops/shape/cpu.hpp); the lowerings fill them from a graph node.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace memfit::kernels {

// concat  in: x_0..x_{k-1}   out: y, joined along one axis.
// slice   in: x              out: y = x[..., start:start+len, ...] along the axis.
// The tensors are viewed as [outer, axis, inner].
struct ConcatParams {
  int64_t outer, inner;
  std::vector<int64_t> sizes;  // extent of each input along the axis
};
struct SliceParams {
  int64_t outer, inner, axis_in, start, len;
};

}  // namespace memfit::kernels
