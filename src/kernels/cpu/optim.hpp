// Optimizer updates (hand-written, f32): the formulas of params.hpp in the
// reference's order of operations, vectorised and threaded.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "kernels/params.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_sgd_update(const SgdParams& p);
std::unique_ptr<Kernel> make_adam_update(const AdamParams& p);

}  // namespace memfit::kernels::cpu
