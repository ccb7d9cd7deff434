#include <dlfcn.h>

#include <mutex>
#include <stdexcept>

#include "kernels/cuda/common.hpp"

namespace memfit::kernels::cuda {
namespace {

#define MEMFIT_STRING2(x) #x
#define MEMFIT_STRING(x) MEMFIT_STRING2(x)  // after macro expansion: cublasSgemm -> "cublasSgemm_v2"
#define MEMFIT_SONAME(prefix, major) prefix MEMFIT_STRING(major)

Libraries g_lib;

// Loads cuBLAS and cuDNN of the major versions memfit was built with and
// resolves the functions it calls; "" on success, else why not.
std::string load_libraries() {
  const char* blas_name = MEMFIT_SONAME("libcublas.so.", CUBLAS_VER_MAJOR);
  const char* dnn_name = MEMFIT_SONAME("libcudnn.so.", CUDNN_MAJOR);
  void* blas = dlopen(blas_name, RTLD_NOW | RTLD_LOCAL);
  if (!blas) return std::string("cuBLAS could not be loaded (") + dlerror() + ")";
  void* dnn = dlopen(dnn_name, RTLD_NOW | RTLD_LOCAL);
  if (!dnn) return std::string("cuDNN could not be loaded (") + dlerror() + ")";
  std::string missing;
#define MEMFIT_RESOLVE(handle, name, file)                                                        \
  g_lib.name = reinterpret_cast<decltype(g_lib.name)>(dlsym(handle, MEMFIT_STRING(name)));        \
  if (!g_lib.name) missing += std::string(missing.empty() ? "" : ", ") + MEMFIT_STRING(name) + " in " + file;
#define MEMFIT_RESOLVE_BLAS(name) MEMFIT_RESOLVE(blas, name, blas_name)
#define MEMFIT_RESOLVE_DNN(name) MEMFIT_RESOLVE(dnn, name, dnn_name)
  MEMFIT_CUBLAS_FUNCTIONS(MEMFIT_RESOLVE_BLAS)
  MEMFIT_CUDNN_FUNCTIONS(MEMFIT_RESOLVE_DNN)
  if (!missing.empty()) return "the CUDA libraries lack functions memfit calls: " + missing;
  return "";
}

}  // namespace

const Libraries& lib() { return g_lib; }

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": " + lib().cublasGetStatusString(s));
}
void check(cudnnStatus_t s, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": " + lib().cudnnGetErrorString(s));
}

const std::string& unavailable_reason() {
  static const std::string reason = [] {
    int driver = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) {
      cudaGetLastError();
      return std::string("no NVIDIA driver is installed (libcuda.so.1 was not found)");
    }
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return std::string("no usable CUDA GPU: ") + cudaGetErrorString(e);
    if (n == 0) return std::string("no CUDA GPU is visible to this process");
    return load_libraries();
  }();
  return reason;
}

const Context& context() {
  static std::once_flag once;
  static Context ctx;
  std::call_once(once, [] {
    if (!unavailable_reason().empty()) throw std::runtime_error(unavailable_reason());
    check(cudaGetDevice(&ctx.device), "cudaGetDevice");
    check(cudaGetDeviceProperties(&ctx.props, ctx.device), "cudaGetDeviceProperties");
    // The legacy default stream for now: the executor's plain copies are
    // then ordered with the kernels without further synchronisation.
    ctx.stream = nullptr;
    check(lib().cublasCreate(&ctx.blas), "cublasCreate");
    check(lib().cublasSetStream(ctx.blas, ctx.stream), "cublasSetStream");
    // fp32 products stay fp32 (no TF32): the goldens' tolerances are fp32's.
    check(lib().cublasSetMathMode(ctx.blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    check(lib().cudnnCreate(&ctx.dnn), "cudnnCreate");
    check(lib().cudnnSetStream(ctx.dnn, ctx.stream), "cudnnSetStream");
    check(cudaMalloc(&ctx.flag, sizeof(int)), "cudaMalloc (context flag)");
    // cuBLAS's recommended workspace: 32 MiB on Hopper and newer, 4 MiB before.
    ctx.blas_workspace_bytes = ctx.props.major >= 9 ? (size_t(32) << 20) : (size_t(4) << 20);
    check(cudaMalloc(&ctx.blas_workspace, ctx.blas_workspace_bytes), "cudaMalloc (cuBLAS workspace)");
    check(lib().cublasSetWorkspace(ctx.blas, ctx.blas_workspace, ctx.blas_workspace_bytes), "cublasSetWorkspace");
  });
  if (!ctx.blas) throw std::runtime_error(unavailable_reason().empty() ? "the CUDA context failed to start" : unavailable_reason());
  return ctx;
}

}  // namespace memfit::kernels::cuda
