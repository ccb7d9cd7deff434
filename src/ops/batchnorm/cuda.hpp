// CUDA kernels of batch normalisation (ops/batchnorm/cuda.cu), f32 values
// with double statistics as the reference's (ops/batchnorm/ref.hpp; the
// variance in one pass over values shifted by the channel's first, which
// double keeps exact enough), reduced in a fixed order (the same bits every
// run), the running statistics updated in place as the reference does.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "ops/batchnorm/params.hpp"

namespace memfit::kernels::cuda {

std::unique_ptr<Kernel> batch_norm(const BatchNormParams& p);      // x, gamma, beta, rm, rv -> y, mean, var
std::unique_ptr<Kernel> batch_norm_bwd(const BatchNormParams& p);  // x, dy, gamma, mean, var -> dx, dgamma, dbeta

}  // namespace memfit::kernels::cuda
