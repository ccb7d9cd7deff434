// CUDA lowering of the shape ops: views need no kernel on any device.
#include "runtime/kernel_table.hpp"

namespace memfit {

void register_shape_cuda_kernels() {
  register_cuda_kernel("reshape", [](const LoweredGraph&, NodeId) { return std::unique_ptr<kernels::Kernel>(); });
}

}  // namespace memfit
