// Parameter structs of batch normalisation: plain data shared by the scalar
// reference kernels (ops/batchnorm/ref.hpp) and the fast CPU kernels
// (ops/batchnorm/cpu.hpp); the lowerings fill them from a graph node.
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

// batch_norm      in: x[N,C,HW], gamma[C], beta[C], running_mean[C], running_var[C]
//                 out: y, mean[C], var[C] (biased batch variance when training;
//                 copies of the running statistics in eval)
//   training: normalises with batch statistics and updates the running
//   statistics in place: rm = (1-momentum) rm + momentum mean,
//   rv = (1-momentum) rv + momentum var * n/(n-1), n = N*HW.
// batch_norm_bwd  in: x, dy, gamma, mean, var   out: dx, dgamma[C], dbeta[C]
struct BatchNormParams {
  int64_t N, C, HW;
  double eps = 1e-5, momentum = 0.1;
  bool training = true;
  bool update_stats = true;  // false: a recomputation, which leaves the running statistics alone
};

}  // namespace memfit::kernels
