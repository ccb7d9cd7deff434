#include "kernels/ref/dropout.hpp"
#include "runtime/lower/lower_util.hpp"

namespace memfit {
namespace {

// The stream attribute holds the layer-name hash bit-cast to int64.
kernels::DropoutParams dropout_params(const Graph& g, const Node& n) {
  return {numel(shape_of(g, n.outputs[0])), n.attrs.f("p"), static_cast<uint64_t>(n.attrs.i("stream"))};
}

}  // namespace

void register_dropout_kernels() {
  register_kernel("dropout", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Backend b = lg.backend();
    return make_ref<kernels::ref::Dropout>(b, dropout_params(g, n));
  });
  register_kernel("dropout_bwd", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Backend b = lg.backend();
    return make_ref<kernels::ref::DropoutBwd>(b, dropout_params(g, n));
  });
}

}  // namespace memfit
