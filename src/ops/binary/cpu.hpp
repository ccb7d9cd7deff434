// The element-wise binary ops with broadcasting (ops/binary/params.hpp),
// hand-written loops over f32: rows of y's last collapsed axis across
// threads, each an element-wise loop the compiler vectorises; gradients of a
// broadcast input summed per element in double, in y's order.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "ops/binary/params.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_binary(const BinaryParams& p);
std::unique_ptr<Kernel> make_binary_bwd(const BinaryParams& p);

}  // namespace memfit::kernels::cpu
