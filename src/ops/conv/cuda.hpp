// CUDA kernels of conv2d and its backward ops (ops/conv/cuda.cu): cuDNN in
// fp32 arithmetic (CUDNN_FMA_MATH: no TF32), NCHW. Each kernel chooses its
// algorithm when it is made, the fastest of cuDNN's deterministic,
// directly summing (GEMM-like: no FFT or Winograd transforms) ones as
// measured once per shape and process (its heuristics where the measurement
// cannot run), and asks for that algorithm's workspace as its planned
// scratch: cuDNN never allocates memory of its own during a step.
#pragma once

#include <memory>
#include <string>

#include "kernels/kernel.hpp"
#include "ops/conv/params.hpp"

namespace memfit::kernels::cuda {

std::unique_ptr<Kernel> conv2d(const ConvParams& p);             // x, w, b -> y
std::unique_ptr<Kernel> conv2d_bwd_data(const ConvParams& p);    // dy, w -> dx
std::unique_ptr<Kernel> conv2d_bwd_weight(const ConvParams& p);  // x, dy -> dw, db

// The algorithms measured so far, one "shape algorithm" line each, and
// taking such lines (from an earlier process) as if measured: runs on one
// machine then compute with the same algorithms, so a resumed run gives the
// bits the uninterrupted one would (fit/machine_profile.hpp keeps them).
std::string conv_choices();
void adopt_conv_choices(const std::string& text);

}  // namespace memfit::kernels::cuda
