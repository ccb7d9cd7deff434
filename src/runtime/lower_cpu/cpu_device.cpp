// The CPU device: host arenas; the fast CPU kernel (runtime/lower_cpu/)
// where one is registered and takes the node, else the reference kernel,
// between conversions when the node stores bf16/fp16.
#include "kernels/cpu/conv.hpp"
#include "runtime/device.hpp"
#include "runtime/kernel_table.hpp"
#include "runtime/lower_cpu/layout.hpp"

namespace memfit {
namespace {

class CpuDevice final : public HostDevice {
 public:
  const char* name() const override { return "cpu"; }
  Backend backend() const override { return Backend::Cpu; }

  void prepare(LoweredGraph& lg) const override {
    const Graph& g = lg.graph();
    if (!lg.options().plain && lg.options().blocked_layouts) lg.set_layouts(cpu_layouts(g));
    // The bf16 product path matters (and is measured) only for bf16 graphs.
    for (const Value& v : g.values())
      if (v.dtype == DType::bf16) {
        lg.set_bf16_products_native(kernels::cpu::bf16_convs_native());
        break;
      }
  }

  std::unique_ptr<kernels::Kernel> make_kernel(const LoweredGraph& lg, NodeId id) const override {
    const KernelFactory* fast = find_cpu_kernel(lg.node(id).op);
    if (fast)
      if (auto k = (*fast)(lg, id)) return k;
    return make_reference_kernel(lg, id, fast);
  }
};

}  // namespace

const Device& cpu_device() {
  static const CpuDevice d;
  return d;
}

}  // namespace memfit
