#include <stdexcept>
#include <string>

#include "ops/tier/ref.hpp"
#include "runtime/device.hpp"
#include "runtime/lower/lower_util.hpp"

namespace memfit {
namespace {

kernels::TierParams tier_params(const LoweredGraph& lg, ValueId tiered, bool async) {
  const Value& v = lg.graph().value(tiered);
  if (!lg.device().host_addressable())
    throw std::invalid_argument(std::string("'") + v.name + "' is tiered, and the tier kernels copy through host "
                                "memory, which device '" + lg.device().name() + "' does not have");
  return {v.name, static_cast<size_t>(numel(v.shape)) * lg.device().elem_size(v.dtype), async};
}

}  // namespace

void register_tier_ref_kernels() {
  register_kernel("tier_load", [](const LoweredGraph& lg, NodeId id) -> std::unique_ptr<kernels::Kernel> {
    const Node& n = lg.node(id);
    return std::make_unique<kernels::ref::TierCopy>(kernels::ref::TierCopy::Kind::Load, tier_params(lg, n.inputs.at(0), n.attrs.i("async", 0) != 0));
  });
  register_kernel("tier_store", [](const LoweredGraph& lg, NodeId id) -> std::unique_ptr<kernels::Kernel> {
    const Node& n = lg.node(id);
    return std::make_unique<kernels::ref::TierCopy>(kernels::ref::TierCopy::Kind::Store, tier_params(lg, n.inputs.at(1), n.attrs.i("async", 0) != 0));
  });
  register_kernel("tier_wait", [](const LoweredGraph& lg, NodeId id) -> std::unique_ptr<kernels::Kernel> {
    return std::make_unique<kernels::ref::TierCopy>(kernels::ref::TierCopy::Kind::Wait, tier_params(lg, lg.node(id).inputs.at(0), true));
  });
}

}  // namespace memfit
