// A device: where a graph's arenas live and how its nodes become kernels.
//
// The executor talks to its device only: arenas are allocated and freed by
// it, values cross between host and device memory through copy_to_device /
// copy_to_host, and every node is lowered by make_kernel from the graph's
// lowering context (runtime/lowered.hpp). The planner, autodiff and the op
// registry know nothing of devices.
//
// Devices are found by name (device_named; Backend is a shorthand for the
// built-in ones' names, and nothing decides on it: what differs between
// devices is asked of the Device). Built in:
//   CpuDevice ("cpu", runtime/lower_cpu/cpu_device.cpp): the fast CPU
//     kernel where one is registered and takes the node, else the reference
//     kernel, between conversions when the node stores bf16/fp16.
//   ReferenceDevice ("reference" / "reference64",
//     runtime/lower/reference_device.cpp): the scalar oracle, storing floats
//     as f32 or, for Reference64, every float value as double.
//   CudaDevice ("cuda", runtime/cuda/cuda_device.cpp): arenas in GPU
//     memory (one cudaMalloc per arena), kernels from ops/<family>/cuda.cu.
// The first two keep their arenas in host memory (HostDevice). docs/adding-an-op.md
// says how to add one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/kernel.hpp"
#include "memfit/graph.hpp"
#include "memfit/runtime.hpp"
#include "runtime/lowered.hpp"

namespace memfit {

// The fit's cost model of a step on a device (fit/fit.hpp's
// predict_step_seconds): a model for ranking plans, not a promise.
struct StepCosts {
  // The products' rate where the device has no measurement (FLOP/s).
  double fallback_flops_per_second = 60e9;
  // Launch and bookkeeping of one node run (s).
  double seconds_per_node = 20e-6;
  // A micro-batch of m rows runs its products at m / (m + this) of the
  // sustained rate (kernels amortise less over few rows).
  double half_rate_rows = 4;
};

// What a plan's report says about the machine a device computes on.
struct DeviceInfo {
  std::string model;            // the processor ("AMD EPYC (family 26, model 2)")
  std::string library;          // the kernel library's version (oneDNN's)
  std::string library_isa;      // the instruction set the library runs
  std::string vector_isa;       // the target memfit's own loops were built for
  bool bf16_compute = false;    // the library computes in bf16
};

// A device is also the copy engine of the memory space its arenas are in
// (kernels::BufferCopies): the offload tier reaches a buffer in memory the
// host cannot address through the device's copies.
class Device : public kernels::BufferCopies {
 public:
  ~Device() override = default;
  virtual const char* name() const = 0;

  // Bytes per element of a value of type t as this device stores it.
  virtual size_t elem_size(DType t) const { return dtype_size(t); }
  // True if the device stores every float value in one wide type (double),
  // so low-precision nodes need no conversions.
  virtual bool wide_floats() const { return false; }

  // Arena memory: `bytes` (a multiple of arena_alignment()) aligned to
  // arena_alignment(); throws std::bad_alloc. free(nullptr) does nothing.
  virtual size_t arena_alignment() const = 0;
  virtual void* allocate(size_t bytes) const = 0;
  virtual void free(void* p) const = 0;
  // True if the host may read and write device memory through its pointers
  // (guard-byte mode needs it).
  virtual bool host_addressable() const = 0;
  // dst is device memory and src host memory (copy_to_device), or the other
  // way round (copy_to_host); fill sets device bytes.
  virtual void copy_to_device(void* dst, const void* src, size_t bytes) const = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) const = 0;
  virtual void fill(void* dst, uint8_t byte, size_t bytes) const = 0;

  // Lowering: fill in the device's part of a new lowering context (layouts,
  // product path); make node id's kernel (nullptr for nodes that need none:
  // views). make_kernel throws std::runtime_error for an op without a
  // lowering.
  virtual void prepare(LoweredGraph& lg) const { (void)lg; }
  virtual std::unique_ptr<kernels::Kernel> make_kernel(const LoweredGraph& lg, NodeId id) const = 0;

  // For the plan's report and the fit's speed model.
  virtual DeviceInfo info() const = 0;
  // How convolutions and linear layers run when activations are stored as
  // `precision` ("" for f32).
  virtual std::string product_path(DType precision) const = 0;
  // Sustained FLOP/s of the products at a large batch with the process's
  // threads, measured on each call (a fraction of a second; 0: unknown).
  // The command keeps it per machine (fit/machine_profile.hpp).
  virtual double measure_product_flops_per_second() const { return 0.0; }
  // A step's time with activations stored as `precision`, relative to f32.
  virtual double storage_cost(DType precision) const { (void)precision; return 1.0; }
  // The fit's cost constants for a step on this device (StepCosts).
  virtual StepCosts step_costs() const { return {}; }
  // Before a plan's baseline memory is measured: load the code the first
  // step would load (library_gemm: some kernel calls the library's gemm,
  // Kernel::runs_library_gemm), and hand back caches an earlier plan left
  // behind.
  virtual void settle(bool library_gemm = false) const { (void)library_gemm; }
  // What the device chose by measurement for the kernels made so far (a
  // GPU's convolution algorithms), as text, and taking such text from an
  // earlier process before kernels are made: the same choices then give the
  // same bits (fit/machine_profile.hpp keeps them per machine).
  virtual std::string tuning() const { return ""; }
  virtual void adopt_tuning(const std::string& text) const { (void)text; }
  // Waits until the device has finished the work queued so far (kernels run
  // asynchronously on a GPU; profiling times each to its end).
  virtual void synchronize() const {}
  // The queue (a CUDA stream) the device's kernels put their work on, given
  // to each in StepContext::queue; null where kernels finish inside run().
  virtual void* queue() const { return nullptr; }
  // Whether the device's kernels store values of type t (bf16/f16
  // activations, compact state); the fit searches only those.
  virtual bool stores(DType t) const { (void)t; return true; }
  // A device with memory of its own (a GPU): its free and total bytes now
  // (cudaMemGetInfo). Host devices: false (their arenas are the process's).
  virtual bool memory_info(size_t& free_bytes, size_t& total_bytes) const {
    (void)free_bytes;
    (void)total_bytes;
    return false;
  }
  // True if every element of the f32 buffers (device memory) is finite.
  virtual bool all_finite(const std::vector<std::pair<const float*, size_t>>& bufs) const = 0;

  // The copy engine (kernels::BufferCopies): the device's copies.
  void to_buffer(void* dst, const void* host, size_t bytes) const final { copy_to_device(dst, host, bytes); }
  void from_buffer(void* host, const void* src, size_t bytes) const final { copy_to_host(host, src, bytes); }
};

// Arenas in host memory (aligned_alloc), copies by memcpy.
class HostDevice : public Device {
 public:
  static constexpr size_t kArenaAlign = 4096;
  size_t arena_alignment() const override { return kArenaAlign; }
  void* allocate(size_t bytes) const override;
  void free(void* p) const override;
  bool host_addressable() const override { return true; }
  void copy_to_device(void* dst, const void* src, size_t bytes) const override;
  void copy_to_host(void* dst, const void* src, size_t bytes) const override;
  void fill(void* dst, uint8_t byte, size_t bytes) const override;
  // The host CPU (kernels/cpu/engine.hpp's machine_info), for every device
  // that computes on it.
  DeviceInfo info() const override;
  std::string product_path(DType precision) const override;
  bool all_finite(const std::vector<std::pair<const float*, size_t>>& bufs) const override;
};

const Device& cpu_device();                 // runtime/lower_cpu/cpu_device.cpp
// The CUDA device (runtime/cuda/cuda_device.cpp): the process's current GPU
// (GPU 0 unless CUDA_VISIBLE_DEVICES says otherwise). Throws std::runtime_error with
// cuda_unavailable_reason() where there is none (a build without CUDA, no
// driver, no GPU).
const Device& cuda_device();
// Why cuda_device() would throw ("" where a GPU is there to use).
std::string cuda_unavailable_reason();
// How many arenas the CUDA device has allocated in this process (one
// cudaMalloc each; the tests check that a step allocates none).
size_t cuda_arena_allocations();
const Device& reference_device(bool wide);  // runtime/lower/reference_device.cpp
// The test devices (runtime/lower/offset_device.cpp): the f32 reference
// kernels ("reference-offset"), or the CPU device's ("cpu-offset": the
// same, fast enough for ResNet-18), over arenas the host may not address.
// Their arena pointers lie at an offset that makes them non-canonical
// addresses (a host read or write through one faults); their kernels and
// copies translate them. Anything that reaches arena memory other than
// through the device's copies crashes on it, as it would on a GPU's memory.
const Device& offset_device(bool cpu_kernels = false);
// "cpu-own-memory": the CPU's kernels over such arenas, in a memory of its
// own of kOwnMemoryDeviceBytes that memory_info reports (free: what its
// arenas leave), as a GPU's. A run on it is planned as one on a GPU: the
// arenas against the device's budget (--device-memory, else its free
// memory), the host's RAM apart against --memory or the host's limit.
constexpr size_t kOwnMemoryDeviceBytes = size_t(1) << 30;
const Device& own_memory_device();
// The built-in device a Backend names (device_named(backend_name(b)); one
// instance per process; devices hold no per-graph state).
const Device& device_for(Backend b);

// Devices by name. Built in: "cpu", "reference", "reference64",
// "reference-offset" and "cpu-offset" (offset_device), and "cuda" (which throws
// cuda_unavailable_reason() where there is no GPU). A program may add its
// own (a name taken is replaced). device_named throws std::invalid_argument
// naming the known devices for another name.
void register_device(const std::string& name, const Device& (*get)());
const Device& device_named(const std::string& name);
std::vector<std::string> device_names();
// The device an executor with this config runs on (ExecConfig::device, or
// the backend's).
const Device& device_of(const ExecConfig& cfg);

}  // namespace memfit
