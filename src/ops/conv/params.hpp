// Parameter structs of the convolution family (conv2d and its backward ops): plain data shared by the scalar
// reference kernels (ops/conv/ref.hpp) and the fast CPU kernels
// (ops/conv/cpu.hpp); the lowerings fill them from a graph node.
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

// conv2d            in: x[N,C,H,W], w[K,C/G,R,S], b[K] (if bias)  out: y[N,K,OH,OW]
// conv2d_bwd_data   in: dy[N,K,OH,OW], w                          out: dx[N,C,H,W]
// conv2d_bwd_weight in: x, dy                                     out: dw[K,C/G,R,S], db[K] (if bias)
struct ConvParams {
  int64_t N, C, H, W, K, R, S, OH, OW;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1, groups = 1;
  bool bias = false;
};

}  // namespace memfit::kernels
