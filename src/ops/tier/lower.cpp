#include "ops/tier/lower.hpp"

#include <string>

#include "ops/tier/ref.hpp"
#include "runtime/device.hpp"
#include "runtime/kernel_table.hpp"

namespace memfit {
namespace {

kernels::TierParams tier_params(const LoweredGraph& lg, ValueId tiered, bool async) {
  const Value& v = lg.graph().value(tiered);
  return {v.name, static_cast<size_t>(numel(v.shape)) * lg.device().elem_size(v.dtype), async};
}

}  // namespace

std::unique_ptr<kernels::Kernel> make_tier_kernel(const LoweredGraph& lg, NodeId id) {
  using kernels::ref::TierCopy;
  const Node& n = lg.node(id);
  // How the tier reaches the kernel's buffer: by memcpy in host memory, else
  // through the device's copies.
  const kernels::BufferCopies* via = lg.device().host_addressable() ? nullptr : &lg.device();
  const bool async = n.attrs.i("async", 0) != 0;
  if (n.op == "tier_load")
    return std::make_unique<TierCopy>(TierCopy::Kind::Load, tier_params(lg, n.inputs.at(0), async), via);
  if (n.op == "tier_store")
    return std::make_unique<TierCopy>(TierCopy::Kind::Store, tier_params(lg, n.inputs.at(1), async), via);
  return std::make_unique<TierCopy>(TierCopy::Kind::Wait, tier_params(lg, n.inputs.at(0), true), via);
}

void register_tier_ref_kernels() {
  for (const char* op : {"tier_load", "tier_store", "tier_wait"}) register_kernel(op, make_tier_kernel);
}

}  // namespace memfit
