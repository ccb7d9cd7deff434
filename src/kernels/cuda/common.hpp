// What every CUDA kernel of memfit shares: error checks that throw, the
// process's CUDA context (the compute stream and the cuBLAS and cuDNN
// handles), and launch sizes. Host code; the kernels (ops/<family>/cuda.cu)
// include it too.
//
// Streams: every kernel launches on its step's queue (StepContext::queue,
// which the executor sets to the device's: Context::stream), cuBLAS and
// cuDNN calls go to the same stream (their handles are bound to it), and
// the executor's copies (runtime/cuda/cuda_device.cpp) are ordered with it,
// so a step's nodes run in schedule order without a host synchronisation
// between them.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/kernel.hpp"

namespace memfit::kernels::cuda {

// cuBLAS and cuDNN are loaded when the CUDA device is first used (dlopen),
// never at the process's start: linked, their code and relocations cost a
// CPU-only run about 150 MiB of resident memory. Their functions are called
// through lib(), whose members have the headers' types.
#define MEMFIT_CUBLAS_FUNCTIONS(X)                                                                            \
  X(cublasCreate) X(cublasGetStatusString) X(cublasSetMathMode) X(cublasSetStream) X(cublasSetWorkspace) \
  X(cublasSgemm) X(cublasSgemmStridedBatched)
#define MEMFIT_CUDNN_FUNCTIONS(X)                                                                            \
  X(cudnnAddTensor) X(cudnnConvolutionBackwardBias) X(cudnnConvolutionBackwardData)                        \
  X(cudnnConvolutionBackwardFilter) X(cudnnConvolutionForward) X(cudnnCreate)                              \
  X(cudnnCreateConvolutionDescriptor) X(cudnnCreateFilterDescriptor) X(cudnnCreateTensorDescriptor)        \
  X(cudnnDestroyConvolutionDescriptor) X(cudnnDestroyFilterDescriptor) X(cudnnDestroyTensorDescriptor)     \
  X(cudnnGetConvolutionBackwardDataAlgorithm_v7) X(cudnnGetConvolutionBackwardDataWorkspaceSize)           \
  X(cudnnGetConvolutionBackwardFilterAlgorithm_v7) X(cudnnGetConvolutionBackwardFilterWorkspaceSize)       \
  X(cudnnGetConvolutionForwardAlgorithm_v7) X(cudnnGetConvolutionForwardWorkspaceSize) X(cudnnGetErrorString) \
  X(cudnnGetVersion) X(cudnnSetConvolution2dDescriptor) X(cudnnSetConvolutionGroupCount)                   \
  X(cudnnSetConvolutionMathType) X(cudnnSetFilter4dDescriptor) X(cudnnSetStream) X(cudnnSetTensor4dDescriptor)   \
  X(cudnnFindConvolutionForwardAlgorithmEx) X(cudnnFindConvolutionBackwardDataAlgorithmEx)                    \
  X(cudnnFindConvolutionBackwardFilterAlgorithmEx)

struct Libraries {
#define MEMFIT_CUDA_FUNCTION(name) decltype(&::name) name = nullptr;
  MEMFIT_CUBLAS_FUNCTIONS(MEMFIT_CUDA_FUNCTION)
  MEMFIT_CUDNN_FUNCTIONS(MEMFIT_CUDA_FUNCTION)
#undef MEMFIT_CUDA_FUNCTION
};
// The loaded functions; only after context() (or an empty unavailable_reason()).
const Libraries& lib();

// Throw std::runtime_error("<what>: <the library's message>") on failure.
void check(cudaError_t e, const char* what);
void check(cublasStatus_t s, const char* what);
void check(cudnnStatus_t s, const char* what);

struct Context {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  cudnnHandle_t dnn = nullptr;
  cudaDeviceProp props{};
  int* flag = nullptr;  // one device int for reductions to a yes/no (all_finite)
  // cuBLAS's workspace, given to it once (cublasSetWorkspace) so that it
  // never allocates one itself during a step; part of the context's own
  // memory, taken before any plan is measured.
  void* blas_workspace = nullptr;
  size_t blas_workspace_bytes = 0;
};

// Why there is no usable GPU ("" if there is one): no driver, no device, a
// driver older than the runtime, cuBLAS or cuDNN not found. Asks once per
// process.
const std::string& unavailable_reason();
// The context, made on first use (the handles take the GPU's memory for
// their own state once, before any plan is measured). Throws with
// unavailable_reason() where there is no GPU.
const Context& context();

// The stream a kernel's work goes on (StepContext::queue).
inline cudaStream_t queue(const StepContext& ctx) { return static_cast<cudaStream_t>(ctx.queue); }

constexpr int kThreads = 256;
// Blocks of kThreads for n elements (grid-stride loops cover the rest).
inline unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

// True if every element of p[0, n) (device memory) is finite; synchronises.
bool all_finite(const float* p, size_t n);

}  // namespace memfit::kernels::cuda
