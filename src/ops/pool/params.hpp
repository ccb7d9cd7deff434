// Parameter structs of the pooling ops: plain data shared by the scalar
// reference kernels (ops/pool/ref.hpp) and the fast CPU kernels
// (ops/pool/cpu.hpp); the lowerings fill them from a graph node.
//
// Dimension letters: N batch, C input channels, H/W input height/width,
// K output channels, R/S kernel height/width, OH/OW output height/width,
// M/N/K for matrix products (C[M,N] = A[M,K] * B[K,N]).
// All tensors are dense row-major (NCHW for images) unless a kernel says so.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace memfit::kernels {

// max_pool2d      in: x[N,C,H,W]        out: y[N,C,OH,OW], idx[N,C,OH,OW] (i32 workspace)
// max_pool2d_bwd  in: dy, idx           out: dx[N,C,H,W]
// avg_pool2d      in: x                 out: y
// avg_pool2d_bwd  in: dy                out: dx
// Padding never wins a max; avg divides by the full window (count_include_pad)
// or by the valid elements.
struct PoolParams {
  int64_t N, C, H, W, OH, OW, R, S;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  bool count_include_pad = true;
};

// global_avg_pool      in: x[N,C,H,W]  out: y[N,C]
// global_avg_pool_bwd  in: dy[N,C]     out: dx[N,C,H,W] = dy / (H*W)
struct GlobalPoolParams {
  int64_t N, C, HW;
};

}  // namespace memfit::kernels
