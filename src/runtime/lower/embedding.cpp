#include "kernels/ref/embedding.hpp"
#include "kernels/ref/permute.hpp"
#include "runtime/lower/lower_util.hpp"
#include "runtime/lower/params_of_embed.hpp"

namespace memfit {

void register_embedding_kernels() {
  // A bf16 output runs as the f32 kernel between conversions (runtime/mixed.hpp).
  register_kernel("embedding", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Backend b = lg.backend();
    return make_ref<kernels::ref::Embedding>(b, embedding_params(g, n));
  });
  register_kernel("embedding_bwd", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Backend b = lg.backend();
    return make_ref<kernels::ref::EmbeddingBwd>(b, embedding_params(g, n));
  });
  // Integer values (ids) keep their own storage type in every backend, float
  // values follow the backend.
  register_kernel("permute", [](const LoweredGraph& lg, NodeId id) -> std::unique_ptr<kernels::Kernel> {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Backend b = lg.backend();
    const kernels::PermuteParams p = permute_params(g, n);
    const DType dt = g.value(n.outputs[0]).dtype;
    if (dt == DType::i32) return std::make_unique<kernels::ref::Permute<int32_t>>(p);
    if (dt == DType::u8) return std::make_unique<kernels::ref::Permute<uint8_t>>(p);
    return make_ref<kernels::ref::Permute>(b, p);
  });
}

}  // namespace memfit
