// oneDNN convolution kernels (f32, plain NCHW / [K, C/G, R, S] layouts).
// Each factory returns nullptr when oneDNN has no implementation for the
// shape; the caller then uses the reference kernel.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "kernels/params.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_conv2d(const ConvParams& p);
std::unique_ptr<Kernel> make_conv2d_bwd_data(const ConvParams& p);
std::unique_ptr<Kernel> make_conv2d_bwd_weight(const ConvParams& p);

}  // namespace memfit::kernels::cpu
