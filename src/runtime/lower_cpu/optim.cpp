#include "kernels/cpu/optim.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"

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

void register_cpu_optim_kernels() {
  using KPtr = std::unique_ptr<kernels::Kernel>;
  register_cpu_kernel("sgd_update", [](const Graph& g, const Node& n, Backend) -> KPtr {
    if (!all_f32(g, n)) return nullptr;
    kernels::SgdParams p;
    fill_common(g, n, p);
    p.momentum = n.attrs.f("momentum");
    p.nesterov = n.attrs.i("nesterov") != 0;
    return kernels::cpu::make_sgd_update(p);
  });
  register_cpu_kernel("adam_update", [](const Graph& g, const Node& n, Backend) -> KPtr {
    if (!all_f32(g, n)) return nullptr;
    kernels::AdamParams p;
    fill_common(g, n, p);
    p.beta1 = n.attrs.f("beta1");
    p.beta2 = n.attrs.f("beta2");
    p.eps = n.attrs.f("eps");
    p.decoupled = n.attrs.s("kind") == "adamw";
    return kernels::cpu::make_adam_update(p);
  });
}

}  // namespace memfit
