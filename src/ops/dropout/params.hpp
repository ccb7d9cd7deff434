// Parameter structs of dropout: plain data shared by the scalar
// reference kernels (ops/dropout/ref.hpp) and the fast CPU kernels
// (ops/dropout/cpu.hpp); the lowerings fill them from a graph node.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memfit/rng.hpp"

namespace memfit::kernels {

// dropout      in: x      out: y, mask[n] (u8: 1 kept)
// dropout_bwd  in: dy, mask  out: dx
// The tensor is [rows, ...] with the batch first. Element i is kept iff
// rng::uniform01(rng::stream_key(ctx.seed, stream, ctx.step), ctx.row0 * (n / rows) + i) >= float(p)
// (compared in f32, as tests/golden/make_golden.py does); kept values are scaled by 1/(1-p). A
// micro-batch (of an accumulated step, or one rank's share) so draws its rows of the whole global
// batch's mask: one process with accumulation m draws row0 = m * rows, i.e. m * n.
struct DropoutParams {
  int64_t n;
  double p;
  uint64_t stream;
  int64_t rows = 1;  // the leading (batch) extent; n is a multiple of it
};

// The mask stream of the formula above for one run: the key, and the
// counter of this micro-batch's element 0 (element i draws base + i).
struct DropoutDraw {
  uint64_t key, base;
};
inline DropoutDraw dropout_draw(const DropoutParams& p, uint64_t seed, int64_t step, int64_t row0) {
  const int64_t per_row = p.rows > 1 ? p.n / p.rows : p.n;
  return {rng::stream_key(seed, p.stream, static_cast<uint64_t>(step)),
          static_cast<uint64_t>(row0) * static_cast<uint64_t>(per_row)};
}

}  // namespace memfit::kernels
