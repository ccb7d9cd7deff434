// add_broadcast and sum_leading over f32 (ops/broadcast/params.hpp).
// add: rows split across threads, each row a vectorised add. sum: columns
// split across threads in blocks; each block sums its rows in order into
// double accumulators, so the result does not depend on the thread count.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "ops/broadcast/params.hpp"

namespace memfit::kernels::cpu {

std::unique_ptr<Kernel> make_add_broadcast(const BroadcastParams& p);
std::unique_ptr<Kernel> make_sum_leading(const BroadcastParams& p);

}  // namespace memfit::kernels::cpu
