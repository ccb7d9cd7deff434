// Device-wide checks the executor asks of the CUDA device.
#include "kernels/cuda/common.hpp"

namespace memfit::kernels::cuda {
namespace {

__global__ void any_nonfinite(const float* p, int64_t n, int* flag) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    if (!isfinite(p[i])) {
      *flag = 1;
      return;
    }
}

}  // namespace

bool all_finite(const float* p, size_t n) {
  const Context& c = context();
  check(cudaMemsetAsync(c.flag, 0, sizeof(int), c.stream), "cudaMemsetAsync");
  if (n) any_nonfinite<<<blocks_for(static_cast<int64_t>(n)), kThreads, 0, c.stream>>>(p, static_cast<int64_t>(n), c.flag);
  check(cudaGetLastError(), "all_finite launch");
  int h = 0;
  check(cudaMemcpyAsync(&h, c.flag, sizeof(int), cudaMemcpyDeviceToHost, c.stream), "cudaMemcpyAsync");
  check(cudaStreamSynchronize(c.stream), "cudaStreamSynchronize");
  return h == 0;
}

}  // namespace memfit::kernels::cuda
