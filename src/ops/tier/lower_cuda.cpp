// The tier kernels on the CUDA device: the same kernels as on the host
// devices, their copies between the tier's host buffer and the GPU's
// memory made by the device (cudaMemcpyAsync on its stream, then a wait):
// a copy is ordered after the kernels queued before it.
#include "ops/tier/lower.hpp"
#include "runtime/kernel_table.hpp"

namespace memfit {

void register_tier_cuda_kernels() {
  for (const char* op : {"tier_load", "tier_store", "tier_wait"}) register_cuda_kernel(op, make_tier_kernel);
}

}  // namespace memfit
