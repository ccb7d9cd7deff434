// The runtime executes a planned graph: kernels are made and bound to their
// planned offsets once, then every step only runs them.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "memfit/graph.hpp"
#include "memfit/plan.hpp"

namespace memfit {

class Device;     // runtime/device.hpp
class TierStore;  // runtime/tier_store.hpp

// The scratch and library heap of each kernel signature planned so far
// (runtime/lowered.hpp: op, attributes, operand shapes, types and layouts,
// device): building a kernel (oneDNN primitive descriptors) is what
// planning costs, and the candidates of one fit share most of their
// layers. Whoever plans many graphs (a run's planner) owns one and names
// it in ExecConfig::kernel_sizes; nothing in the process keeps one.
class KernelSizes {
 public:
  struct Bytes {
    size_t scratch = 0, heap = 0;
  };
  // The bytes of `signature`, from make() the first time (called outside
  // the lock: planners on other threads may make other kernels meanwhile).
  Bytes get(const std::string& signature, const std::function<Bytes()>& make);
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, Bytes> bytes_;
};

namespace kernels {
class Kernel;
struct StepContext;
}  // namespace kernels

// A shorthand for the built-in devices' names (device_for in
// runtime/device.hpp: device_named(backend_name(b))), for tests and tools;
// ExecConfig::device names any registered device. Nothing in the engine
// decides on it: what differs between devices is asked of the Device
// (host_addressable, wide_floats, stores, ...); test_layering checks it.
// Cpu: oneDNN and hand-written fast kernels (f32 and bf16 storage).
// Reference: plain scalar kernels in f32. Reference64: the same in double
// (gradient checks); every float value is stored as double.
// Cuda: the first CUDA GPU (runtime/cuda/cuda_device.cpp): arenas in device
// memory, cuBLAS, cuDNN and memfit's own CUDA kernels; f32 values so far.
enum class Backend : uint8_t { Cpu, Reference, Reference64, Cuda };
const char* backend_name(Backend b);

struct ExecConfig {
  Backend backend = Backend::Cpu;
  // The device, where it is not the backend's built-in one: a device found
  // by name (runtime/device.hpp's device_named; "reference-offset", a
  // device a program registers). Null: device_for(backend).
  const Device* device = nullptr;
  PlanOptions plan;
  // Memory lent by another executor for an arena: an evaluation graph reads
  // the training executor's parameters in place and can run in its transient
  // arena (the two never run at once). Must be at least the planned size.
  struct Borrowed {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  std::array<Borrowed, kNumArenas> borrow{};
  bool verify = false;  // run verify_plan after planning (always on in debug builds)
  // true: the constructor makes kernels and the plan only; allocate() then
  // takes the memory (so a plan can be checked against a budget first).
  bool defer_allocation = false;
  // Cpu: keep the activations the lowering chooses channel-blocked (nChw16c,
  // runtime/lower_cpu/layout.hpp); false makes every value plain (benchmarks,
  // A/B checks).
  bool blocked_layouts = true;
  // Tiered values (Value::tiered, memfit/tier.hpp) live in this store; an
  // evaluation executor gets the training one's. Null: the executor makes
  // one in tier_dir when its graph has tiered values.
  std::shared_ptr<TierStore> tier;
  std::string tier_dir;
  // The store made is kept (TierStore::Keep: the file stays, each step
  // commits whole); tier_reopen: a kept file to open again (resume).
  bool tier_keep = false;
  std::string tier_reopen;
  // plan_for's kernel sizes, shared by the plans of one planner; null: each
  // plan makes its kernels.
  std::shared_ptr<KernelSizes> kernel_sizes;
};

class Executor {
 public:
  Executor(const Graph& g, ExecConfig cfg);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Allocates the arenas and binds every kernel to its planned pointers.
  // Called by the constructor unless defer_allocation is set; idempotent.
  void allocate();
  bool allocated() const { return allocated_; }
  // Before allocate(): use another executor's memory for this arena.
  void borrow(Arena a, ExecConfig::Borrowed mem);
  // Before allocate(): keep tiered values in another executor's store (an
  // evaluation reads the training one's parameters there). Null: no change.
  void share_tier(std::shared_ptr<TierStore> tier);
  // Before allocate(): the store this executor makes is kept (ExecConfig::
  // tier_keep), reopening `reopen` where given.
  void keep_tier(std::string reopen = {});

  const Graph& graph() const { return g_; }
  const Plan& plan() const { return plan_; }
  const ExecConfig& config() const { return cfg_; }
  const Device& device() const { return *dev_; }
  // Whether a kernel of the step calls the library's gemm (Kernel::runs_library_gemm).
  bool runs_library_gemm() const;
  size_t elem_size(ValueId v) const;  // bytes per element as stored

  void* data(ValueId v);
  template <class T> T* ptr(ValueId v) { return static_cast<T*>(data(v)); }

  // Bytes value v occupies as stored (numel * elem_size).
  size_t value_bytes(ValueId v) const;
  // Host <-> device copies of a whole value as stored: step inputs in,
  // loss and metrics out. `bytes` must be value_bytes(v) (std::invalid_argument
  // otherwise, naming the value); the executor must be allocated.
  void feed(ValueId v, const void* src, size_t bytes);
  void fetch(ValueId v, void* dst, size_t bytes);
  // Host bytes into or out of value v from its byte `at` on, wherever it
  // lives (host or device memory, or the offload tier); no size check
  // beyond the value's (std::invalid_argument past its end).
  void write_range(ValueId v, size_t at, const void* src, size_t bytes);
  void read_range(ValueId v, size_t at, void* dst, size_t bytes);
  // Host bytes into or out of arena a from its byte `at` on, through the
  // device's copies (what data parallelism exchanges on a device whose
  // memory the host cannot address); std::invalid_argument past the
  // arena's end.
  void write_arena(Arena a, size_t at, const void* src, size_t bytes);
  void read_arena(Arena a, size_t at, void* dst, size_t bytes);
  // One scalar output (a loss, a metric) as a double.
  double fetch_scalar(ValueId v);

  // Fills parameters and buffers from their InitSpec with the counter-based
  // generator (seed, parameter name); zeroes gradients and optimizer state.
  // tiered false: leaves tiered values as the store holds them (a reopened
  // offload file).
  void init_params(uint64_t seed, bool tiered = true);
  // Copy a float value in or out as f32 regardless of storage precision.
  void write_f32(ValueId v, const float* src);
  void read_f32(ValueId v, float* dst);

  // Runs the whole schedule, or nodes [begin, end).
  void run(const kernels::StepContext& ctx);
  void run_nodes(size_t begin, size_t end, const kernels::StepContext& ctx);

  // Profiling: while on, run_nodes() times each kernel and adds its wall
  // time to node_seconds()[k] (off, the default: no timing at all; guard-byte
  // mode runs untimed).
  void set_profiling(bool on);
  const std::vector<double>& node_seconds() const { return node_seconds_; }
  // Name of the kernel that runs node k ("" for a node without one: views).
  const char* kernel_name(size_t k) const;

  // Debug: fill the transient and gradient arenas with `byte` (0xFF makes
  // every float NaN) so that unwritten elements show up.
  void poison(uint8_t byte = 0xFF);
  // Guard-byte mode: every node's run is followed by a check of the guards
  // after the buffers it writes; outputs kept after the step keep theirs.
  // True if no guard was found overwritten so far.
  bool guards_intact() const;
  // The first buffer found with an overwritten guard, and which node wrote
  // it ("" if none).
  std::string broken_guard() const;
  // Total bytes of the arenas this executor owns (borrowed ones excluded).
  size_t arena_bytes() const;
  // Base pointer and size of an arena (to lend it to another executor).
  ExecConfig::Borrowed arena(Arena a) const;
  // The store of the tiered values (null without any; set by allocate()).
  const std::shared_ptr<TierStore>& tier() const { return cfg_.tier; }
  std::vector<size_t> node_scratch() const;

 private:
  const Graph& g_;
  ExecConfig cfg_;
  const Device* dev_;
  Plan plan_;
  std::vector<std::unique_ptr<kernels::Kernel>> kernels_;
  std::vector<std::byte*> arenas_;
  std::vector<bool> owned_;
  bool allocated_ = false;
  struct Guard {
    size_t offset;  // in the transient arena
    ValueId value;  // whose guard (kNone: the node's scratch)
  };
  std::vector<std::vector<Guard>> node_guards_;  // per node, in guard mode
  std::string guard_error_;
  bool profiling_ = false;
  std::vector<double> node_seconds_;
  void run_timed(size_t begin, size_t end, const kernels::StepContext& ctx);
  void make_tier();
  void fill_guards();
  bool guard_intact(size_t offset) const;
};

// The plan Executor(g, cfg) makes, byte for byte, without making the
// executor: each node's scratch and library heap come from a kernel made
// and dropped, once per node signature where cfg.kernel_sizes holds them,
// so plans sharing layers (a fit's candidates) build each kernel's
// primitives once.
Plan plan_for(const Graph& g, const ExecConfig& cfg);

// Byte size of every value as `backend` stores it.
std::vector<size_t> value_storage_bytes(const Graph& g, Backend b);
std::vector<size_t> value_storage_bytes(const Graph& g, const Device& d);

// Table of the time profiled steps spent, per op kind and per layer:
// seconds[k] is node k's total over `steps` steps (Executor::node_seconds()
// after set_profiling(true) and that many steps).
std::string profile_report(const Executor& ex, const std::vector<double>& seconds, int64_t steps);

}  // namespace memfit
