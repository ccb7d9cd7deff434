// The tier kernels' one factory (tier_load, tier_store, tier_wait), the
// same for every device: each kernel reaches its buffer by memcpy where the
// device's memory is the host's, else through the device's copies
// (kernels::BufferCopies). The reference table and the CUDA table
// (lower_cuda.cpp) register it.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "runtime/lowered.hpp"

namespace memfit {

std::unique_ptr<kernels::Kernel> make_tier_kernel(const LoweredGraph& lg, NodeId id);

}  // namespace memfit
