// Optimizer updates (hand-written; parameters and gradients f32, state f32,
// bf16 or 8-bit: params.hpp's StateLayout): the formulas of params.hpp in
// the reference's order of operations, vectorised and threaded.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "ops/optim/params.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_sgd_update(const SgdParams& p);
std::unique_ptr<Kernel> make_adam_update(const AdamParams& p);
std::unique_ptr<Kernel> make_adafactor_update(const AdafactorParams& p);

}  // namespace memfit::kernels::cpu
