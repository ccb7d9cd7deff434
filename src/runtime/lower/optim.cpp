#include "kernels/ref/optim.hpp"
#include "runtime/lower/lower_util.hpp"

namespace memfit {
namespace {

template <class P>
void fill_common(const Graph& g, const Node& n, P& p) {
  const int64_t k = n.attrs.i("count");
  const auto& decay = n.attrs.ints("decay");
  for (int64_t t = 0; t < k; ++t) {
    p.sizes.push_back(numel(g.value(n.inputs[static_cast<size_t>(t)]).shape));
    p.weight_decay.push_back(decay[static_cast<size_t>(t)] ? n.attrs.f("weight_decay") : 0.0);
  }
  p.clip_norm = n.attrs.f("clip_norm", 0.0);
}

}  // namespace

void register_optim_kernels() {
  register_kernel("sgd_update", [](const Graph& g, const Node& n, Backend b) {
    kernels::SgdParams p;
    fill_common(g, n, p);
    p.momentum = n.attrs.f("momentum");
    p.nesterov = n.attrs.i("nesterov") != 0;
    return make_ref<kernels::ref::SgdUpdate>(b, p);
  });
  register_kernel("grad_accumulate", [](const Graph& g, const Node& n, Backend b) {
    return make_ref<kernels::ref::GradAccumulate>(b, kernels::EltwiseParams{numel(g.value(n.inputs[0]).shape)});
  });
  register_kernel("adam_update", [](const Graph& g, const Node& n, Backend b) {
    kernels::AdamParams p;
    fill_common(g, n, p);
    p.beta1 = n.attrs.f("beta1");
    p.beta2 = n.attrs.f("beta2");
    p.eps = n.attrs.f("eps");
    p.decoupled = n.attrs.s("kind") == "adamw";
    return make_ref<kernels::ref::AdamUpdate>(b, p);
  });
}

}  // namespace memfit
