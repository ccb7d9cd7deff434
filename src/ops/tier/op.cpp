// The offload tier's ops (memfit/tier.hpp places them): tier_load reads a
// tiered value from the tier into a planned buffer of memory, tier_store
// writes such a buffer back; their block is the tiered value's name. With
// attribute async = 1 they queue the copy on the tier's I/O thread, and a
// tier_wait on the buffer (its one input) waits for it: a load's before the
// buffer's first reader, a store's before the buffer may be reused.
#include "ops/common/op_common.hpp"

namespace memfit {

void register_tier_ops() {
  OpDef load;
  load.name = "tier_load";
  load.traits.no_gradient = true;
  load.traits.reference_serves_cpu = true;
  load.traits.tier_io = OpTraits::TierIo::Load;
  load.infer = [](const Graph& g, const Node& n) {
    if (n.inputs.size() != 1) shape_fail(g, n, "tier_load reads one tiered value");
    return std::vector<ValueMeta>{{in_shape(g, n, 0), in_dtype(g, n, 0)}};
  };
  register_op(load);

  OpDef store;
  store.name = "tier_store";
  store.traits.no_gradient = true;
  store.traits.reference_serves_cpu = true;
  store.traits.tier_io = OpTraits::TierIo::Store;
  store.infer = [](const Graph& g, const Node& n) {
    if (n.inputs.size() != 2) shape_fail(g, n, "tier_store writes a buffer (input 0) into a tiered value (input 1)");
    if (in_shape(g, n, 0) != in_shape(g, n, 1) || in_dtype(g, n, 0) != in_dtype(g, n, 1))
      shape_fail(g, n, "tier_store's buffer and tiered value differ in shape or type");
    return std::vector<ValueMeta>{};
  };
  register_op(store);

  OpDef wait;
  wait.name = "tier_wait";
  wait.traits.no_gradient = true;
  wait.traits.reference_serves_cpu = true;
  wait.traits.tier_io = OpTraits::TierIo::Wait;
  wait.infer = [](const Graph& g, const Node& n) {
    if (n.inputs.size() != 1) shape_fail(g, n, "tier_wait waits for one buffer's queued copies");
    return std::vector<ValueMeta>{};
  };
  register_op(wait);
}

}  // namespace memfit
