// Fast CPU lowering of attention and attention_bwd (ops/attention/cpu.hpp):
// the f32 kernel, between conversions when the node stores bf16 or f16.
#include "ops/attention/cpu.hpp"
#include "ops/attention/params_of.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"

namespace memfit {
namespace {

using KPtr = std::unique_ptr<kernels::Kernel>;

template <KPtr (*Make)(const kernels::AttentionParams&)>
KPtr lower(const LoweredGraph& lg, NodeId id) {
  const Graph& g = lg.graph();
  const Node& n = lg.node(id);
  return converted(g, n, kernels::ElemType::F32, Make(attention_params(g, n)));
}

}  // namespace

void register_attention_cpu_kernels() {
  register_cpu_kernel("attention", lower<kernels::cpu::make_attention>);
  register_cpu_kernel("attention_bwd", lower<kernels::cpu::make_attention_bwd>);
}

}  // namespace memfit
