#include "kernels/ref/eltwise.hpp"
#include "runtime/lower/lower_util.hpp"
#include "runtime/mixed.hpp"

namespace memfit {

void register_eltwise_kernels() {
  auto n_of = [](const Graph& g, const Node& n) { return numel(g.value(n.outputs[0]).shape); };
  register_kernel("relu", [=](const Graph& g, const Node& n, Backend b) {
    return make_ref<kernels::ref::Relu>(b, kernels::EltwiseParams{n_of(g, n)});
  });
  register_kernel("relu_bwd", [=](const Graph& g, const Node& n, Backend b) {
    return make_ref<kernels::ref::ReluBwd>(b, kernels::EltwiseParams{n_of(g, n)});
  });
  register_kernel("add", [=](const Graph& g, const Node& n, Backend b) {
    return make_ref<kernels::ref::Add>(b, kernels::EltwiseParams{n_of(g, n)});
  });
  register_kernel("scale", [=](const Graph& g, const Node& n, Backend b) {
    return make_ref<kernels::ref::Scale>(b, kernels::EltwiseParams{n_of(g, n), n.attrs.f("alpha")});
  });
  register_kernel("fill", [=](const Graph& g, const Node& n, Backend b) {
    return make_ref<kernels::ref::Fill>(b, kernels::FillParams{n_of(g, n), n.attrs.f("value")});
  });
  register_kernel("cast", make_cast_kernel);
  // Views need no kernel.
  register_kernel("reshape", [](const Graph&, const Node&, Backend) { return std::unique_ptr<kernels::Kernel>(); });
}

}  // namespace memfit
