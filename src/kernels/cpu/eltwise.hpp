// Element-wise kernels: relu through oneDNN eltwise, the rest hand-written
// (memory-bound loops). All may run in place where the op allows it (relu,
// add, scale: y over x/a; relu_bwd: dx over dy).
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "kernels/params.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_relu(const EltwiseParams& p);
std::unique_ptr<Kernel> make_relu_bwd(const EltwiseParams& p);
std::unique_ptr<Kernel> make_add(const EltwiseParams& p);
std::unique_ptr<Kernel> make_scale(const EltwiseParams& p);
std::unique_ptr<Kernel> make_fill(const FillParams& p);

}  // namespace memfit::kernels::cpu
