// oneDNN batch normalization kernels (f32, NCHW or [N, C]).
// Factories return nullptr when oneDNN has no implementation.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "kernels/params.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_batch_norm(const BatchNormParams& p);
std::unique_ptr<Kernel> make_batch_norm_bwd(const BatchNormParams& p);

}  // namespace memfit::kernels::cpu
