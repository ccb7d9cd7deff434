// Dropout with the counter-based mask of params.hpp (hand-written, f32).
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "kernels/params.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_dropout(const DropoutParams& p);
std::unique_ptr<Kernel> make_dropout_bwd(const DropoutParams& p);

}  // namespace memfit::kernels::cpu
