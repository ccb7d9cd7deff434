// The CPU device: host arenas; the fast CPU kernel (ops/<family>/lower_cpu.cpp)
// where one is registered and takes the node, else the reference kernel,
// between conversions when the node stores bf16/fp16.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/engine.hpp"
#include "ops/conv/cpu.hpp"
#include "runtime/device.hpp"
#include "runtime/kernel_table.hpp"
#include "runtime/lower_cpu/cpu_lowering.hpp"
#include "runtime/lower_cpu/layout.hpp"

namespace memfit {

void CpuLowering::sign(const LoweredGraph& lg, NodeId id, std::string& s) const {
  s += bf16_products_native ? 'n' : '-';
  const Node& n = lg.node(id);
  for (const auto* vs : {&n.inputs, &n.outputs}) {
    s += '/';
    for (ValueId v : *vs) {
      s += std::to_string(static_cast<int>(layouts[static_cast<size_t>(v)]));
      s += ',';
    }
  }
}

const CpuLowering* cpu_lowering(const LoweredGraph& lg) {
  return dynamic_cast<const CpuLowering*>(lg.device_lowering());
}

kernels::cpu::Layout cpu_layout(const LoweredGraph& lg, ValueId v) {
  const CpuLowering* c = cpu_lowering(lg);
  return c ? c->layouts[static_cast<size_t>(v)] : kernels::cpu::Layout::Plain;
}

std::vector<kernels::cpu::Layout> cpu_value_layouts(const LoweredGraph& lg) {
  std::vector<kernels::cpu::Layout> r(lg.graph().num_values());
  for (size_t v = 0; v < r.size(); ++v) r[v] = cpu_layout(lg, static_cast<ValueId>(v));
  return r;
}

bool bf16_products_native(const LoweredGraph& lg) {
  const CpuLowering* c = cpu_lowering(lg);
  return !c || c->bf16_products_native;
}

namespace {

class CpuDevice final : public HostDevice {
 public:
  const char* name() const override { return "cpu"; }

  void prepare(LoweredGraph& lg) const override {
    const Graph& g = lg.graph();
    auto state = std::make_unique<CpuLowering>();
    if (!lg.options().plain && lg.options().blocked_layouts) state->layouts = cpu_layouts(g);
    else state->layouts.assign(g.num_values(), kernels::cpu::Layout::Plain);
    // The bf16 product path matters (and is measured) only for bf16 graphs.
    for (const Value& v : g.values())
      if (v.dtype == DType::bf16) {
        state->bf16_products_native = kernels::cpu::bf16_convs_native();
        break;
      }
    lg.set_device_lowering(std::move(state));
  }

  std::unique_ptr<kernels::Kernel> make_kernel(const LoweredGraph& lg, NodeId id) const override {
    const KernelFactory* fast = find_cpu_kernel(lg.node(id).op);
    if (fast)
      if (auto k = (*fast)(lg, id)) return k;
    return make_reference_kernel(lg, id, fast);
  }

  double measure_product_flops_per_second() const override {
    // Measured on a micro-batch of 16 (ops/conv/cpu.hpp), which runs at
    // 16 / 20 of the large-batch rate by the fit's model (fit/fit.cpp).
    const double measured = kernels::cpu::conv_flops_per_second();
    if (!(measured > 0)) return 0.0;
    return std::clamp(measured * 20.0 / 16.0, 1e8, 1e14);
  }

  double storage_cost(DType precision) const override {
    // Without bf16 kernels in the build every bf16 node runs as an f32
    // kernel between conversions: far slower, a last resort for memory.
    if (precision != DType::bf16) return 1.0;
    return !kernels::cpu::bf16_kernels_available() ? 2.0 : kernels::cpu::bf16_convs_native() ? 0.6 : 1.05;
  }

  void settle(bool library_gemm) const override {
    // Without AVX-512's brgemm every matmul runs on the gemm; with it, only
    // the convolutions that use it.
    if (library_gemm || !kernels::cpu::onednn_bf16_compute()) kernels::cpu::warm_gemm_code();
    kernels::cpu::drop_primitive_cache();
  }
};

}  // namespace

const Device& cpu_device() {
  static const CpuDevice d;
  return d;
}

}  // namespace memfit
