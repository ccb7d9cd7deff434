// Parameter struct of the element-wise binary ops with broadcasting (op
// "binary", attr kind): plain data shared by the scalar reference kernels
// (ops/binary/ref.hpp) and the fast CPU kernels (ops/binary/cpu.hpp).
//
// binary      in: a, b        out: y = a (kind) b, numpy broadcasting
// binary_bwd  in: a, b, dy    out: d(input wrt) = the sum, over the axes
//                              that input is broadcast along, of dy df/dx
//
//   kind  f(a, b)   df/da     df/db
//   add   a + b     1         1
//   sub   a - b     1         -1
//   mul   a b       b         a
//   div   a / b     1 / b     -a / b^2
//
// The shapes are right-aligned; each axis of y is the larger of the two,
// the other 1. They reach the kernels collapsed (make_binary_params):
// axes of size 1 in y dropped and neighbouring axes that broadcast alike
// merged, so that y is dims[0] x ... x dims[r-1] (row-major) and a, b are
// read at the strides a_strides, b_strides (0 along an axis they are
// broadcast on). Every sum of binary_bwd runs in double, in the order of
// y's elements, whatever the threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace memfit::kernels {

enum class BinaryKind : uint8_t { Add, Sub, Mul, Div };

// The kernels walk at most this many collapsed axes (a graph's tensors
// have fewer).
constexpr size_t kMaxBinaryAxes = 16;

struct BinaryParams {
  BinaryKind kind = BinaryKind::Add;
  std::vector<int64_t> dims, a_strides, b_strides;
  int wrt = 0;  // binary_bwd: 0 the gradient of a, 1 of b
};

inline int64_t binary_numel(const BinaryParams& p) {
  int64_t n = 1;
  for (int64_t d : p.dims) n *= d;
  return n;
}

// a and b's shapes (broadcastable: checked by the op) collapsed as above.
inline BinaryParams make_binary_params(BinaryKind kind, std::vector<int64_t> a, std::vector<int64_t> b, int wrt = 0) {
  const size_t r = std::max(a.size(), b.size());
  a.insert(a.begin(), r - a.size(), 1);
  b.insert(b.begin(), r - b.size(), 1);
  BinaryParams p;
  p.kind = kind;
  p.wrt = wrt;
  std::vector<int> pattern;  // per kept axis: bit 0 a broadcast, bit 1 b broadcast
  for (size_t k = 0; k < r; ++k) {
    const int64_t y = std::max(a[k], b[k]);
    if (a[k] != b[k] && a[k] != 1 && b[k] != 1) throw std::invalid_argument("shapes do not broadcast");
    if (y == 1) continue;
    const int pat = (a[k] == 1 ? 1 : 0) | (b[k] == 1 ? 2 : 0);
    if (!pattern.empty() && pattern.back() == pat) {
      p.dims.back() *= y;
    } else {
      p.dims.push_back(y);
      pattern.push_back(pat);
    }
  }
  if (p.dims.size() > kMaxBinaryAxes) throw std::invalid_argument("more broadcast axes than the kernels walk");
  if (p.dims.empty()) {  // one element
    p.dims.push_back(1);
    pattern.push_back(0);
  }
  const size_t c = p.dims.size();
  p.a_strides.assign(c, 0);
  p.b_strides.assign(c, 0);
  int64_t sa = 1, sb = 1;
  for (size_t k = c; k-- > 0;) {
    if (!(pattern[k] & 1)) p.a_strides[k] = sa, sa *= p.dims[k];
    if (!(pattern[k] & 2)) p.b_strides[k] = sb, sb *= p.dims[k];
  }
  return p;
}

}  // namespace memfit::kernels
