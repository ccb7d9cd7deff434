// Parameter structs of the linear and matmul ops: plain data shared by the scalar
// reference kernels (ops/linear/ref.hpp) and the fast CPU kernels
// (ops/linear/cpu.hpp); the lowerings fill them from a graph node.
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

// linear            in: x[M,K], w[N,K], b[N] (if bias)   out: y[M,N] = x w^T + b
// linear_bwd_data   in: dy[M,N], w[N,K]                  out: dx[M,K]
// linear_bwd_weight in: x[M,K], dy[M,N]                  out: dw[N,K], db[N] (if bias)
struct LinearParams {
  int64_t M, K, N;
  bool bias = false;
};

// matmul  in: a, b  out: c[B,M,N] = op(a) op(b) per batch;
//   a is [B,M,K] ([B,K,M] if trans_a), b is [B,K,N] ([B,N,K] if trans_b).
//   a_batch/b_batch = 1 broadcasts that operand over the batch.
struct MatmulParams {
  int64_t B, M, N, K;
  bool trans_a = false, trans_b = false;
  int64_t a_batch = 0, b_batch = 0;  // 0 means B
};

}  // namespace memfit::kernels
