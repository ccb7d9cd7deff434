// The CUDA device: a step's arenas in GPU memory, one cudaMalloc per arena
// when the executor allocates (never inside a step), and every node's
// kernel from its family's CUDA lowering (ops/<family>/lower_cuda.cpp).
// Values cross between host and device only through copy_to_device and
// copy_to_host (feed, fetch, write_f32, read_f32, init_params).
#include <atomic>
#include <cstdio>
#include <stdexcept>

#include "kernels/cuda/common.hpp"
#include "ops/conv/cuda.hpp"
#include "runtime/device.hpp"
#include "runtime/kernel_table.hpp"

namespace memfit {
namespace {

namespace kc = kernels::cuda;

std::atomic<size_t> g_allocations{0};

std::string ops_list() {
  std::string s;
  for (const std::string& op : cuda_kernel_ops()) s += (s.empty() ? "" : ", ") + op;
  return s;
}

class CudaDevice final : public Device {
 public:
  const char* name() const override { return "cuda"; }
  // cudaMalloc's own alignment (256 bytes) is what the kernels need;
  // planned offsets inside an arena keep the planner's alignment.
  size_t arena_alignment() const override { return 256; }
  void* allocate(size_t bytes) const override {
    kc::context();
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      cudaGetLastError();  // clear it: the caller reports the plan against the free memory
      throw std::bad_alloc();
    }
    ++g_allocations;
    return p;
  }
  void free(void* p) const override {
    if (p) cudaFree(p);
  }
  bool host_addressable() const override { return false; }
  void copy_to_device(void* dst, const void* src, size_t bytes) const override {
    const kc::Context& c = kc::context();
    kc::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c.stream), "copy to the GPU");
    // The source is pageable host memory the caller may reuse at once.
    kc::check(cudaStreamSynchronize(c.stream), "copy to the GPU");
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) const override {
    const kc::Context& c = kc::context();
    kc::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c.stream), "copy from the GPU");
    kc::check(cudaStreamSynchronize(c.stream), "copy from the GPU");
  }
  void fill(void* dst, uint8_t byte, size_t bytes) const override {
    const kc::Context& c = kc::context();
    kc::check(cudaMemsetAsync(dst, byte, bytes, c.stream), "cudaMemsetAsync");
  }

  std::unique_ptr<kernels::Kernel> make_kernel(const LoweredGraph& lg, NodeId id) const override {
    kc::context();
    const Graph& g = lg.graph();
    const Node& n = g.node(id);
    auto check_type = [&](ValueId v) {
      const Value& val = g.value(v);
      if (is_float(val.dtype) && val.dtype != DType::f32)
        throw std::runtime_error("the CUDA device computes f32 values so far; " + describe(g, n) + " stores '" +
                                 val.name + "' as " + dtype_name(val.dtype) +
                                 " (train with --precision fp32, fp32 optimizer state and master weights)");
    };
    for (ValueId v : n.inputs) check_type(v);
    for (ValueId v : n.outputs) check_type(v);
    const KernelFactory* f = find_cuda_kernel(n.op);
    if (!f)
      throw std::runtime_error("op '" + n.op + "' (" + describe(g, n) + ") has no CUDA kernel yet; the CUDA device runs " +
                               ops_list());
    return (*f)(lg, id);
  }

  DeviceInfo info() const override {
    const kc::Context& c = kc::context();
    int driver = 0;
    cudaDriverGetVersion(&driver);
    char libs[160];
    std::snprintf(libs, sizeof libs, "CUDA driver %d.%d, cuBLAS %d, cuDNN %zu", driver / 1000, driver % 1000 / 10,
                  CUBLAS_VERSION, kc::lib().cudnnGetVersion());
    char isa[32];
    std::snprintf(isa, sizeof isa, "sm_%d%d", c.props.major, c.props.minor);
    return {c.props.name, libs, isa, "", false};
  }
  std::string product_path(DType precision) const override {
    return precision == DType::f32 ? "" : "f32 only on the CUDA device so far";
  }
  std::string tuning() const override { return kernels::cuda::conv_choices(); }
  void adopt_tuning(const std::string& text) const override { kernels::cuda::adopt_conv_choices(text); }
  void* queue() const override { return kc::context().stream; }
  void synchronize() const override { kc::check(cudaStreamSynchronize(kc::context().stream), "cudaStreamSynchronize"); }
  bool stores(DType t) const override { return !is_float(t) || t == DType::f32; }
  bool memory_info(size_t& free_bytes, size_t& total_bytes) const override {
    kc::context();
    return cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess;
  }
  bool all_finite(const std::vector<std::pair<const float*, size_t>>& bufs) const override {
    for (const auto& [p, n] : bufs)
      if (!kc::all_finite(p, n)) return false;
    return true;
  }
};

}  // namespace

const Device& cuda_device() {
  kc::context();  // throws with the reason where there is no GPU
  static const CudaDevice d;
  return d;
}

std::string cuda_unavailable_reason() { return kc::unavailable_reason(); }

size_t cuda_arena_allocations() { return g_allocations.load(); }

}  // namespace memfit
