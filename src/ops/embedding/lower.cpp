#include "ops/embedding/params_of.hpp"
#include "ops/embedding/ref.hpp"
#include "runtime/lower/lower_util.hpp"

namespace memfit {

void register_embedding_ref_kernels() {
  // A bf16 output runs as the f32 kernel between conversions (runtime/mixed.hpp).
  register_kernel("embedding", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    return make_ref<kernels::ref::Embedding>(lg, embedding_params(g, n));
  });
  register_kernel("gather_rows", [](const LoweredGraph& lg, NodeId id) {
    return make_ref<kernels::ref::GatherRows>(lg, gather_rows_params(lg.graph(), lg.node(id)));
  });
  register_kernel("gather_rows_bwd", [](const LoweredGraph& lg, NodeId id) {
    return make_ref<kernels::ref::GatherRowsBwd>(lg, gather_rows_params(lg.graph(), lg.node(id)));
  });
  register_kernel("embedding_bwd", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    return make_ref<kernels::ref::EmbeddingBwd>(lg, embedding_params(g, n));
  });
}

}  // namespace memfit
