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
//
// Ceil mode (max pooling, attribute ceil=1) counts a last, partial window
// where the floor does not (PyTorch's ceil_mode=True): output size
// ceil((H + 2 pad - R) / stride) + 1, less one where that window would
// start past the input and its left padding (ops/pool/op.cpp). Its part past the input is
// padding at the end, pad_h_end = (OH - 1) stride + R - H - pad_h, which
// never wins a max; -1 (without ceil mode): the same as pad_h.
struct PoolParams {
  int64_t N, C, H, W, OH, OW, R, S;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  int64_t pad_h_end = -1, pad_w_end = -1;
  bool count_include_pad = true;
  int64_t end_pad_h() const { return pad_h_end < 0 ? pad_h : pad_h_end; }
  int64_t end_pad_w() const { return pad_w_end < 0 ? pad_w : pad_w_end; }
};

// global_avg_pool      in: x[N,C,H,W]  out: y[N,C]
// global_avg_pool_bwd  in: dy[N,C]     out: dx[N,C,H,W] = dy / (H*W)
struct GlobalPoolParams {
  int64_t N, C, HW;
};

}  // namespace memfit::kernels
