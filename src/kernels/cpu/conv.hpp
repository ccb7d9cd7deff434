// oneDNN convolution kernels (f32). Weights are plain [K, C/G, R, S]; the
// activations x/dx and y/dy are stored in the given layouts (Blocked16 needs
// C, respectively K, a multiple of 16). Each factory returns nullptr when
// oneDNN has no implementation for the shape.
#pragma once

#include <memory>

#include "kernels/cpu/layout.hpp"
#include "kernels/kernel.hpp"
#include "kernels/params.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_conv2d(const ConvParams& p, Layout x = Layout::Plain, Layout y = Layout::Plain);
std::unique_ptr<Kernel> make_conv2d_bwd_data(const ConvParams& p, Layout dy = Layout::Plain, Layout dx = Layout::Plain);
std::unique_ptr<Kernel> make_conv2d_bwd_weight(const ConvParams& p, Layout x = Layout::Plain,
                                               Layout dy = Layout::Plain);

}  // namespace memfit::kernels::cpu
