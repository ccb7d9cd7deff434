// CUDA kernels of the element-wise ops (ops/eltwise/cuda.cu), f32: the
// reference's formulas (ops/eltwise/ref.hpp), one thread per element.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "ops/eltwise/params.hpp"

namespace memfit::kernels::cuda {

std::unique_ptr<Kernel> relu(const EltwiseParams& p);      // in: x      out: y
std::unique_ptr<Kernel> relu_bwd(const EltwiseParams& p);  // in: y, dy  out: dx
std::unique_ptr<Kernel> add(const EltwiseParams& p);       // in: a, b   out: a + b
std::unique_ptr<Kernel> scale(const EltwiseParams& p);     // in: x      out: alpha x
std::unique_ptr<Kernel> fill(const FillParams& p);         // out: value

}  // namespace memfit::kernels::cuda
