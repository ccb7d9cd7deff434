// CUDA kernels of the activation family (ops/activation/cuda.cu): every
// kind of ops/activation/params.hpp in f32 storage with the reference's
// double arithmetic and formulas (ops/activation/ref_formulas.hpp), one
// thread per element.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "ops/activation/params.hpp"

namespace memfit::kernels::cuda {

std::unique_ptr<Kernel> activation(const ActivationParams& p);      // x -> y
std::unique_ptr<Kernel> activation_bwd(const ActivationParams& p);  // x, dy -> dx

}  // namespace memfit::kernels::cuda
