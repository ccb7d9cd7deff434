// The reference oracle as a device: scalar kernels (ops/<family>/lower.cpp) in f32,
// or for Reference64 with every float value stored as double.
#include "runtime/device.hpp"
#include "runtime/kernel_table.hpp"

namespace memfit {
namespace {

class ReferenceDevice final : public HostDevice {
 public:
  explicit ReferenceDevice(bool wide) : wide_(wide) {}
  const char* name() const override { return wide_ ? "reference64" : "reference"; }
  size_t elem_size(DType t) const override { return wide_ && is_float(t) ? 8 : dtype_size(t); }
  bool wide_floats() const override { return wide_; }
  std::unique_ptr<kernels::Kernel> make_kernel(const LoweredGraph& lg, NodeId id) const override {
    return make_reference_kernel(lg, id, nullptr);
  }

 private:
  bool wide_;
};

}  // namespace

const Device& reference_device(bool wide) {
  static const ReferenceDevice f32(false), f64(true);
  return wide ? f64 : f32;
}

}  // namespace memfit
