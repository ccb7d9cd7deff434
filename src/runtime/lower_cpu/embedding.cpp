#include "kernels/cpu/embedding.hpp"
#include "kernels/cpu/permute.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"
#include "runtime/lower/params_of_embed.hpp"

namespace memfit {

void register_cpu_embedding_kernels() {
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
  // A copy: the Cpu backend stores every type at its own size, which is all
  // the kernel needs to know.
  register_cpu_kernel("permute", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    return kernels::cpu::make_permute(permute_params(g, n), dtype_size(g.value(n.outputs[0]).dtype));
  });
}

}  // namespace memfit
