// The test devices: the reference kernels, or the CPU device's, over arenas
// the host may not address (runtime/device.hpp's offset_device).
//
// Its arenas are host memory, but the pointers it hands out lie kOffset
// bytes away: bit 62 set, a non-canonical x86-64 address (and one no
// 48- or 57-bit user mapping reaches elsewhere), so a host load or store
// through one faults at once. Everything the device does itself translates
// them back: its copies, its fill, its finiteness check, and its kernels,
// each the inner device's kernel wrapped so that bind() hands it host
// pointers. So a step runs as on the inner device, bit for bit, while any code
// above the device that reads arena memory through a pointer (rather than
// through Executor::read_range and the device's copies) crashes, as it
// would on a GPU's memory. The tests run the goldens, checkpoint and
// resume, and data parallelism through it.
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/device.hpp"
#include "runtime/kernel_table.hpp"

namespace memfit {
namespace {

constexpr uintptr_t kOffset = uintptr_t{1} << 62;

void* to_host(const void* p) {
  return p ? reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) - kOffset) : nullptr;
}
void* to_device(void* p) { return p ? reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) + kOffset) : nullptr; }

// A kernel bound to device pointers: hands its kernel the host pointers
// behind them.
class Translated final : public kernels::Kernel {
 public:
  explicit Translated(std::unique_ptr<kernels::Kernel> k) : k_(std::move(k)) {}
  size_t scratch_bytes() const override { return k_->scratch_bytes(); }
  size_t heap_bytes() const override { return k_->heap_bytes(); }
  bool runs_library_gemm() const override { return k_->runs_library_gemm(); }
  void run(const kernels::StepContext& ctx) override { k_->run(ctx); }
  const char* name() const override { return k_->name(); }

 private:
  void on_bind() override {
    std::vector<void*> in, out;
    for (void* p : in_) in.push_back(to_host(p));
    for (void* p : out_) out.push_back(to_host(p));
    k_->bind(std::move(in), std::move(out), to_host(scratch_));
  }
  std::unique_ptr<kernels::Kernel> k_;
};

// `inner`, a host device, with its arenas moved out of the host's reach.
class OffsetDevice final : public Device {
 public:
  // capacity > 0: a device with that much memory of its own, whose free
  // memory is the capacity less the arenas it holds (as a GPU's).
  OffsetDevice(const Device& inner, const char* name, size_t capacity = 0)
      : d_(inner), name_(name), capacity_(capacity) {}
  const char* name() const override { return name_; }
  size_t elem_size(DType t) const override { return d_.elem_size(t); }
  bool wide_floats() const override { return d_.wide_floats(); }

  size_t arena_alignment() const override { return d_.arena_alignment(); }
  void* allocate(size_t bytes) const override {
    if (capacity_) {
      std::lock_guard<std::mutex> lock(m_);
      if (bytes > capacity_ - held_) throw std::bad_alloc();  // out of its memory
      void* p = to_device(d_.allocate(bytes));
      held_ += bytes;
      sizes_[p] = bytes;
      return p;
    }
    return to_device(d_.allocate(bytes));
  }
  void free(void* p) const override {
    if (capacity_ && p) {
      std::lock_guard<std::mutex> lock(m_);
      auto it = sizes_.find(p);
      if (it != sizes_.end()) held_ -= it->second, sizes_.erase(it);
    }
    d_.free(to_host(p));
  }
  bool memory_info(size_t& free_bytes, size_t& total_bytes) const override {
    if (!capacity_) return false;
    std::lock_guard<std::mutex> lock(m_);
    free_bytes = capacity_ - held_;
    total_bytes = capacity_;
    return true;
  }
  bool host_addressable() const override { return false; }
  void copy_to_device(void* dst, const void* src, size_t bytes) const override {
    std::memcpy(to_host(dst), src, bytes);
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) const override {
    std::memcpy(dst, to_host(src), bytes);
  }
  void fill(void* dst, uint8_t byte, size_t bytes) const override { std::memset(to_host(dst), byte, bytes); }

  void prepare(LoweredGraph& lg) const override { d_.prepare(lg); }
  std::unique_ptr<kernels::Kernel> make_kernel(const LoweredGraph& lg, NodeId id) const override {
    std::unique_ptr<kernels::Kernel> k = d_.make_kernel(lg, id);
    if (!k || k->copies_through_device()) return k;  // (its copies are this device's: they translate)
    return std::make_unique<Translated>(std::move(k));
  }

  DeviceInfo info() const override { return d_.info(); }
  std::string product_path(DType precision) const override { return d_.product_path(precision); }
  double measure_product_flops_per_second() const override { return d_.measure_product_flops_per_second(); }
  double storage_cost(DType precision) const override { return d_.storage_cost(precision); }
  StepCosts step_costs() const override { return d_.step_costs(); }
  void settle(bool library_gemm) const override { d_.settle(library_gemm); }
  bool stores(DType t) const override { return d_.stores(t); }
  bool all_finite(const std::vector<std::pair<const float*, size_t>>& bufs) const override {
    std::vector<std::pair<const float*, size_t>> host;
    for (const auto& [p, n] : bufs) host.emplace_back(static_cast<const float*>(to_host(p)), n);
    return d_.all_finite(host);
  }

 private:
  const Device& d_;
  const char* name_;
  size_t capacity_;
  mutable std::mutex m_;
  mutable size_t held_ = 0;
  mutable std::unordered_map<const void*, size_t> sizes_;
};

}  // namespace

const Device& offset_device(bool cpu_kernels) {
  static const OffsetDevice ref(reference_device(false), "reference-offset"), cpu(cpu_device(), "cpu-offset");
  return cpu_kernels ? cpu : ref;
}

const Device& own_memory_device() {
  static const OffsetDevice dev(cpu_device(), "cpu-own-memory", kOwnMemoryDeviceBytes);
  return dev;
}

}  // namespace memfit
