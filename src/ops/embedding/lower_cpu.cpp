#include "ops/embedding/cpu.hpp"
#include "ops/embedding/params_of.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"

namespace memfit {

void register_embedding_cpu_kernels() {
  using KPtr = std::unique_ptr<kernels::Kernel>;
  // act: the storage of y (forward) or dy (backward); the table is f32, or
  // bf16 (master weights, its own kernel on every CPU); dtable is f32.
  register_cpu_kernel("embedding", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    if (bf16_weight(g, n.inputs[1])) {
      const DType y = g.value(n.outputs[0]).dtype;
      if (y != DType::f32 && y != DType::bf16) return nullptr;
      return kernels::cpu::make_embedding(embedding_params(g, n),
                                          y == DType::f32 ? kernels::ElemType::F32 : kernels::ElemType::BF16, true);
    }
    const auto act = cpu_act(g, n);
    if (!act || g.value(n.inputs[1]).dtype != DType::f32) return nullptr;
    return kernels::cpu::make_embedding(embedding_params(g, n), *act);
  });
  register_cpu_kernel("embedding_bwd", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const auto act = cpu_act(g, n);
    if (!act) return nullptr;
    return kernels::cpu::make_embedding_bwd(embedding_params(g, n), *act);
  });
}

}  // namespace memfit
