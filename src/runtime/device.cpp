#include "runtime/device.hpp"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

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

const Device& device_for(Backend b) {
  switch (b) {
    case Backend::Cpu: return cpu_device();
    case Backend::Reference: return reference_device(false);
    case Backend::Reference64: return reference_device(true);
  }
  throw std::invalid_argument("unknown backend");
}

}  // namespace memfit
