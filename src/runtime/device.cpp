#include "runtime/device.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>

#include "kernels/cpu/engine.hpp"
#include "kernels/cpu/parallel.hpp"
#include "ops/conv/cpu.hpp"

namespace memfit {

void* HostDevice::allocate(size_t bytes) const {
  void* p = std::aligned_alloc(kArenaAlign, bytes);
  if (!p) throw std::bad_alloc();
  return p;
}

void HostDevice::free(void* p) const { std::free(p); }

void HostDevice::copy_to_device(void* dst, const void* src, size_t bytes) const { std::memcpy(dst, src, bytes); }

void HostDevice::copy_to_host(void* dst, const void* src, size_t bytes) const { std::memcpy(dst, src, bytes); }

void HostDevice::fill(void* dst, uint8_t byte, size_t bytes) const { std::memset(dst, byte, bytes); }

DeviceInfo HostDevice::info() const {
  const kernels::cpu::MachineInfo& m = kernels::cpu::machine_info();
  return {m.cpu_model, m.onednn_version, m.onednn_isa, m.vector_isa, m.onednn_bf16};
}

std::string HostDevice::product_path(DType precision) const {
  if (precision == DType::bf16) return kernels::cpu::bf16_product_path();
  if (precision == DType::f16) return "f32 between conversions (no f16 arithmetic on the CPU)";
  return "";
}

bool HostDevice::all_finite(const std::vector<std::pair<const float*, size_t>>& bufs) const {
  for (const auto& [p, n] : bufs) {
    const int64_t m = static_cast<int64_t>(n);
    const float* q = p;
    const bool bad = kernels::cpu::parallel_sum(m, [&] {
      int part = 0;
#pragma omp for schedule(static) nowait
      for (int64_t i = 0; i < m; ++i) part |= !std::isfinite(q[i]);
      return static_cast<double>(part);
    }) != 0.0;
    if (bad) return false;
  }
  return true;
}

#ifndef MEMFIT_HAVE_CUDA
const Device& cuda_device() { throw std::runtime_error(cuda_unavailable_reason()); }
std::string cuda_unavailable_reason() {
  return "this memfit was built without CUDA (no CUDA compiler was found, or MEMFIT_CUDA was off)";
}
size_t cuda_arena_allocations() { return 0; }
#endif

const Device& device_for(Backend b) { return device_named(backend_name(b)); }

namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, const Device& (*)()> by_name{
      {"cpu", [] () -> const Device& { return cpu_device(); }},
      {"reference", [] () -> const Device& { return reference_device(false); }},
      {"reference64", [] () -> const Device& { return reference_device(true); }},
      {"reference-offset", [] () -> const Device& { return offset_device(false); }},
      {"cpu-offset", [] () -> const Device& { return offset_device(true); }},
      {"cpu-own-memory", [] () -> const Device& { return own_memory_device(); }},
      {"cuda", [] () -> const Device& { return cuda_device(); }},
  };
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_device(const std::string& name, const Device& (*get)()) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.by_name[name] = get;
}

const Device& device_named(const std::string& name) {
  Registry& r = registry();
  const Device& (*get)() = nullptr;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.by_name.find(name);
    if (it != r.by_name.end()) get = it->second;
  }
  if (!get) {
    std::string known;
    for (const std::string& n : device_names()) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument("no device named '" + name + "' (the devices: " + known + ")");
  }
  return get();
}

std::vector<std::string> device_names() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [n, get] : r.by_name) names.push_back(n);
  return names;
}

const Device& device_of(const ExecConfig& cfg) { return cfg.device ? *cfg.device : device_for(cfg.backend); }

}  // namespace memfit
