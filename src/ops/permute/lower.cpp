#include "ops/permute/params_of.hpp"
#include "ops/permute/ref.hpp"
#include "runtime/lower/lower_util.hpp"

namespace memfit {

void register_permute_ref_kernels() {
  // Integer values (ids) keep their own storage type in every backend, float
  // values follow the backend.
  register_kernel("permute", [](const LoweredGraph& lg, NodeId id) -> std::unique_ptr<kernels::Kernel> {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const kernels::PermuteParams p = permute_params(g, n);
    const DType dt = g.value(n.outputs[0]).dtype;
    if (dt == DType::i32) return std::make_unique<kernels::ref::Permute<int32_t>>(p);
    if (dt == DType::u8) return std::make_unique<kernels::ref::Permute<uint8_t>>(p);
    return make_ref<kernels::ref::Permute>(lg, p);
  });
}

}  // namespace memfit
