// cuDNN's convolution API (cudnnConvolutionForward and its two backward
// calls) is marked deprecated in cuDNN 9 in favour of its graph API; it is
// still shipped and supported, and is the smaller piece of code here.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#pragma nv_diag_suppress 1444

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/common.hpp"
#include "ops/conv/cuda.hpp"

namespace memfit::kernels::cuda {
namespace {

// The descriptors of one convolution.
class ConvDesc {
 public:
  explicit ConvDesc(const ConvParams& p) {
    check(lib().cudnnCreateTensorDescriptor(&x_), "cudnnCreateTensorDescriptor");
    check(lib().cudnnCreateTensorDescriptor(&y_), "cudnnCreateTensorDescriptor");
    check(lib().cudnnCreateTensorDescriptor(&b_), "cudnnCreateTensorDescriptor");
    check(lib().cudnnCreateFilterDescriptor(&w_), "cudnnCreateFilterDescriptor");
    check(lib().cudnnCreateConvolutionDescriptor(&c_), "cudnnCreateConvolutionDescriptor");
    auto i = [](int64_t v) { return static_cast<int>(v); };
    check(lib().cudnnSetTensor4dDescriptor(x_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(p.N), i(p.C), i(p.H), i(p.W)),
          "conv input descriptor");
    check(lib().cudnnSetTensor4dDescriptor(y_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(p.N), i(p.K), i(p.OH), i(p.OW)),
          "conv output descriptor");
    check(lib().cudnnSetTensor4dDescriptor(b_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, i(p.K), 1, 1), "conv bias descriptor");
    check(lib().cudnnSetFilter4dDescriptor(w_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, i(p.K), i(p.C / p.groups), i(p.R), i(p.S)),
          "conv filter descriptor");
    check(lib().cudnnSetConvolution2dDescriptor(c_, i(p.pad_h), i(p.pad_w), i(p.stride_h), i(p.stride_w), i(p.dil_h),
                                          i(p.dil_w), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
          "conv descriptor");
    check(lib().cudnnSetConvolutionGroupCount(c_, i(p.groups)), "cudnnSetConvolutionGroupCount");
    check(lib().cudnnSetConvolutionMathType(c_, CUDNN_FMA_MATH), "cudnnSetConvolutionMathType");
  }
  ~ConvDesc() {
    lib().cudnnDestroyTensorDescriptor(x_);
    lib().cudnnDestroyTensorDescriptor(y_);
    lib().cudnnDestroyTensorDescriptor(b_);
    lib().cudnnDestroyFilterDescriptor(w_);
    lib().cudnnDestroyConvolutionDescriptor(c_);
  }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;

  cudnnTensorDescriptor_t x_{}, y_{}, b_{};
  cudnnFilterDescriptor_t w_{};
  cudnnConvolutionDescriptor_t c_{};
};

// Algorithms that sum each output's products directly (implicit or explicit
// GEMM, direct): their rounding is that of one f32 sum, the bound the
// goldens hold every device to. The transform algorithms (FFT, Winograd)
// round differently: the ConvNet's 20-step golden drifted 4.5e-4 from
// PyTorch with them on an H200, over its 1e-4 bound.
bool sums_directly(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT;
}
bool sums_directly(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
}
bool sums_directly(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
}

// Without a measurement: the first of cuDNN's ranked algorithms that works, is deterministic (a
// run gives the same bits every time: resume stays exact), sums directly
// and keeps fp32 arithmetic.
template <class Perf>
const Perf& pick(const Perf* perf, int n, const char* what, const ConvParams& p) {
  for (int i = 0; i < n; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].determinism == CUDNN_DETERMINISTIC &&
        sums_directly(perf[i].algo) && perf[i].mathType != CUDNN_TENSOR_OP_MATH &&
        perf[i].mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)
      return perf[i];
  throw std::runtime_error(std::string("cuDNN has no deterministic fp32 algorithm for the ") + what + " of a " +
                           std::to_string(p.R) + "x" + std::to_string(p.S) + " convolution of " +
                           std::to_string(p.C) + " to " + std::to_string(p.K) + " channels");
}

constexpr int kMaxAlgos = 16;

// Choosing by measurement (cudnnFind*AlgorithmEx, as "benchmark mode"
// does): when a kernel is made (planning, never inside a step) each
// algorithm runs once on temporary buffers of the convolution's sizes,
// which are freed again, with a workspace of at most a quarter of the free
// memory (1 GiB at most); the fastest deterministic fp32 one is kept. The
// choice is remembered per shape and direction for the process, so the
// fit's candidates and the executor measure each convolution once.
std::string shape_key(const ConvParams& p, char dir) {
  char b[256];
  std::snprintf(b, sizeof b, "conv2d:%c:%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld", dir, long(p.N),
                long(p.C), long(p.H), long(p.W), long(p.K), long(p.R), long(p.S), long(p.stride_h), long(p.stride_w),
                long(p.pad_h), long(p.pad_w), long(p.dil_h), long(p.dil_w), long(p.groups), long(p.OH), long(p.OW));
  return b;
}

std::mutex g_choice_mu;
std::map<std::string, int>& choices() {
  static std::map<std::string, int> m;
  return m;
}

// Temporary device buffers, zeroed, freed at the end of the measurement.
class Scratch {
 public:
  ~Scratch() {
    for (void* q : p_) cudaFree(q);
  }
  void* get(size_t bytes) {
    void* q = nullptr;
    if (cudaMalloc(&q, bytes ? bytes : 1) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    p_.push_back(q);
    cudaMemset(q, 0, bytes);
    return q;
  }

 private:
  std::vector<void*> p_;
};

size_t measure_workspace_limit() {
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return 0;
  return std::min(free / 4, size_t(1) << 30);
}

// The index in perf (sorted fastest first) of the first usable algorithm, or -1.
template <class Perf>
int first_usable(const Perf* perf, int n, size_t ws_limit) {
  for (int i = 0; i < n; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].determinism == CUDNN_DETERMINISTIC && sums_directly(perf[i].algo) &&
        perf[i].mathType != CUDNN_TENSOR_OP_MATH && perf[i].mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION &&
        perf[i].memory <= ws_limit)
      return i;
  return -1;
}

// The measured choice for (p, dir), measuring it the first time; -1 if
// the measurement could not run (then the heuristics choose).
template <class Measure>
int measured_choice(const ConvParams& p, char dir, Measure measure) {
  const std::string key = shape_key(p, dir);
  std::lock_guard<std::mutex> lock(g_choice_mu);
  auto it = choices().find(key);
  if (it != choices().end()) return it->second;
  const int algo = measure();
  choices()[key] = algo;
  return algo;
}

// What differs between the three directions: the algorithm and result
// types, how cuDNN measures, ranks and sizes them, and which of the
// convolution's three tensors (x, w, y) is written. find(d, x, w, y, ...)
// takes device buffers of x's, w's and y's sizes in that order whatever
// the direction reads or writes.
struct Forward {
  using Algo = cudnnConvolutionFwdAlgo_t;
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  static constexpr char kDir = 'f';
  static constexpr const char* kWhat = "forward pass";
  static cudnnStatus_t find(const ConvDesc& d, void* x, void* w, void* y, int* n, Perf* perf, void* ws, size_t limit) {
    return lib().cudnnFindConvolutionForwardAlgorithmEx(context().dnn, d.x_, x, d.w_, w, d.c_, d.y_, y, kMaxAlgos, n,
                                                        perf, ws, limit);
  }
  static cudnnStatus_t rank(const ConvDesc& d, int* n, Perf* perf) {
    return lib().cudnnGetConvolutionForwardAlgorithm_v7(context().dnn, d.x_, d.w_, d.c_, d.y_, kMaxAlgos, n, perf);
  }
  static cudnnStatus_t workspace(const ConvDesc& d, Algo a, size_t* bytes) {
    return lib().cudnnGetConvolutionForwardWorkspaceSize(context().dnn, d.x_, d.w_, d.c_, d.y_, a, bytes);
  }
};
struct BackwardData {  // dy (y's size), w -> dx (x's size)
  using Algo = cudnnConvolutionBwdDataAlgo_t;
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  static constexpr char kDir = 'd';
  static constexpr const char* kWhat = "data gradient";
  static cudnnStatus_t find(const ConvDesc& d, void* x, void* w, void* y, int* n, Perf* perf, void* ws, size_t limit) {
    return lib().cudnnFindConvolutionBackwardDataAlgorithmEx(context().dnn, d.w_, w, d.y_, y, d.c_, d.x_, x, kMaxAlgos,
                                                             n, perf, ws, limit);
  }
  static cudnnStatus_t rank(const ConvDesc& d, int* n, Perf* perf) {
    return lib().cudnnGetConvolutionBackwardDataAlgorithm_v7(context().dnn, d.w_, d.y_, d.c_, d.x_, kMaxAlgos, n, perf);
  }
  static cudnnStatus_t workspace(const ConvDesc& d, Algo a, size_t* bytes) {
    return lib().cudnnGetConvolutionBackwardDataWorkspaceSize(context().dnn, d.w_, d.y_, d.c_, d.x_, a, bytes);
  }
};
struct BackwardFilter {  // x, dy (y's size) -> dw (w's size)
  using Algo = cudnnConvolutionBwdFilterAlgo_t;
  using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
  static constexpr char kDir = 'w';
  static constexpr const char* kWhat = "weight gradient";
  static cudnnStatus_t find(const ConvDesc& d, void* x, void* w, void* y, int* n, Perf* perf, void* ws, size_t limit) {
    return lib().cudnnFindConvolutionBackwardFilterAlgorithmEx(context().dnn, d.x_, x, d.y_, y, d.c_, d.w_, w,
                                                               kMaxAlgos, n, perf, ws, limit);
  }
  static cudnnStatus_t rank(const ConvDesc& d, int* n, Perf* perf) {
    return lib().cudnnGetConvolutionBackwardFilterAlgorithm_v7(context().dnn, d.x_, d.y_, d.c_, d.w_, kMaxAlgos, n,
                                                               perf);
  }
  static cudnnStatus_t workspace(const ConvDesc& d, Algo a, size_t* bytes) {
    return lib().cudnnGetConvolutionBackwardFilterWorkspaceSize(context().dnn, d.x_, d.y_, d.c_, d.w_, a, bytes);
  }
};

// The algorithm of direction D for p: measured (once per shape and process),
// else the first usable of cuDNN's ranking; and its workspace bytes.
template <class D>
typename D::Algo choose(const ConvParams& p, const ConvDesc& d, size_t& workspace) {
  const int measured = measured_choice(p, D::kDir, [&] {
    Scratch t;
    const size_t limit = measure_workspace_limit();
    void *x = t.get(4 * size_t(p.N * p.C * p.H * p.W)), *w = t.get(4 * size_t(p.K * p.C / p.groups * p.R * p.S)),
         *y = t.get(4 * size_t(p.N * p.K * p.OH * p.OW)), *ws = t.get(limit);
    typename D::Perf perf[kMaxAlgos];
    int n = 0;
    if (!x || !w || !y || !ws || D::find(d, x, w, y, &n, perf, ws, limit) != CUDNN_STATUS_SUCCESS) return -1;
    const int i = first_usable(perf, n, limit);
    return i < 0 ? -1 : static_cast<int>(perf[i].algo);
  });
  typename D::Algo algo;
  if (measured >= 0) {
    algo = static_cast<typename D::Algo>(measured);
  } else {
    typename D::Perf perf[kMaxAlgos];
    int n = 0;
    check(D::rank(d, &n, perf), "cuDNN's algorithm ranking");
    algo = pick(perf, n, D::kWhat, p).algo;
  }
  check(D::workspace(d, algo, &workspace), "cuDNN's workspace size");
  return algo;
}

class Conv2d final : public Kernel {
 public:
  explicit Conv2d(const ConvParams& p) : p_(p), d_(p_), algo_(choose<Forward>(p_, d_, ws_)) {}
  const char* name() const override { return "cudnn.conv2d"; }
  size_t scratch_bytes() const override { return ws_; }
  void run(const StepContext&) override {
    const float one = 1.0f, zero = 0.0f;
    check(lib().cudnnConvolutionForward(context().dnn, &one, d_.x_, in<float>(0), d_.w_, in<float>(1), d_.c_, algo_,
                                  scratch_, ws_, &zero, d_.y_, out<float>(0)),
          "cudnnConvolutionForward");
    if (p_.bias) check(lib().cudnnAddTensor(context().dnn, &one, d_.b_, in<float>(2), &one, d_.y_, out<float>(0)), "cudnnAddTensor");
  }

 private:
  ConvParams p_;
  ConvDesc d_;
  size_t ws_ = 0;  // before algo_: choose() sets it
  cudnnConvolutionFwdAlgo_t algo_{};
};

class Conv2dBwdData final : public Kernel {
 public:
  explicit Conv2dBwdData(const ConvParams& p) : p_(p), d_(p_), algo_(choose<BackwardData>(p_, d_, ws_)) {}
  const char* name() const override { return "cudnn.conv2d_bwd_data"; }
  size_t scratch_bytes() const override { return ws_; }
  void run(const StepContext&) override {
    const float one = 1.0f, zero = 0.0f;
    check(lib().cudnnConvolutionBackwardData(context().dnn, &one, d_.w_, in<float>(1), d_.y_, in<float>(0), d_.c_, algo_,
                                       scratch_, ws_, &zero, d_.x_, out<float>(0)),
          "cudnnConvolutionBackwardData");
  }

 private:
  ConvParams p_;
  ConvDesc d_;
  size_t ws_ = 0;  // before algo_: choose() sets it
  cudnnConvolutionBwdDataAlgo_t algo_{};
};

class Conv2dBwdWeight final : public Kernel {
 public:
  explicit Conv2dBwdWeight(const ConvParams& p) : p_(p), d_(p_), algo_(choose<BackwardFilter>(p_, d_, ws_)) {}
  const char* name() const override { return "cudnn.conv2d_bwd_weight"; }
  size_t scratch_bytes() const override { return ws_; }
  void run(const StepContext&) override {
    const float one = 1.0f, zero = 0.0f;
    check(lib().cudnnConvolutionBackwardFilter(context().dnn, &one, d_.x_, in<float>(0), d_.y_, in<float>(1), d_.c_, algo_,
                                         scratch_, ws_, &zero, d_.w_, out<float>(0)),
          "cudnnConvolutionBackwardFilter");
    if (p_.bias)
      check(lib().cudnnConvolutionBackwardBias(context().dnn, &one, d_.y_, in<float>(1), &zero, d_.b_, out<float>(1)),
            "cudnnConvolutionBackwardBias");
  }

 private:
  ConvParams p_;
  ConvDesc d_;
  size_t ws_ = 0;  // before algo_: choose() sets it
  cudnnConvolutionBwdFilterAlgo_t algo_{};
};

}  // namespace

std::string conv_choices() {
  std::lock_guard<std::mutex> lock(g_choice_mu);
  std::string r;
  for (const auto& [key, algo] : choices())
    if (algo >= 0) r += key + " " + std::to_string(algo) + "\n";
  return r;
}

void adopt_conv_choices(const std::string& text) {
  std::lock_guard<std::mutex> lock(g_choice_mu);
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    const size_t sp = line.rfind(' ');
    if (sp == std::string::npos || line.rfind("conv2d:", 0) != 0) continue;
    char* rest = nullptr;
    const long algo = std::strtol(line.c_str() + sp + 1, &rest, 10);
    if (*rest || algo < 0 || algo > 64) continue;  // not a line this build wrote
    choices().emplace(line.substr(0, sp), static_cast<int>(algo));
  }
}

std::unique_ptr<Kernel> conv2d(const ConvParams& p) { return std::make_unique<Conv2d>(p); }
std::unique_ptr<Kernel> conv2d_bwd_data(const ConvParams& p) { return std::make_unique<Conv2dBwdData>(p); }
std::unique_ptr<Kernel> conv2d_bwd_weight(const ConvParams& p) { return std::make_unique<Conv2dBwdWeight>(p); }

}  // namespace memfit::kernels::cuda
