// Softmax cross-entropy (hand-written, f32 storage, double accumulation as the
// reference does).
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "kernels/params.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_softmax_xent(const XentParams& p);
std::unique_ptr<Kernel> make_softmax_xent_bwd(const XentParams& p);

}  // namespace memfit::kernels::cpu
