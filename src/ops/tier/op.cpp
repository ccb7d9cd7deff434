// The offload tier's ops (memfit/tier.hpp places them): tier_load reads a
// tiered value from the tier into a planned buffer of memory, tier_store
// writes such a buffer back; their block is the tiered value's name. With
// attribute async = 1 they queue the copy on the tier's I/O thread, and a
// tier_wait on the buffer (its one input) waits for it: a load's before the
// buffer's first reader, a store's before the buffer may be reused.
#include "ops/common/op_common.hpp"

namespace memfit {

namespace {

// The three ops share their traits: no gradient, the reference kernel serves
// the CPU, and what they do with the tier.
void register_tier_op(const char* name, OpTraits::TierIo io, decltype(OpDef::infer) infer) {
  OpDef d;
  d.name = name;
  d.traits.no_gradient = true;
  d.traits.reference_serves_cpu = true;
  d.traits.tier_io = io;
  d.infer = std::move(infer);
  register_op(d);
}

}  // namespace

void register_tier_ops() {
  register_tier_op("tier_load", OpTraits::TierIo::Load, [](const Graph& g, const Node& n) {
    if (n.inputs.size() != 1) shape_fail(g, n, "tier_load reads one tiered value");
    return std::vector<ValueMeta>{{in_shape(g, n, 0), in_dtype(g, n, 0)}};
  });
  register_tier_op("tier_store", OpTraits::TierIo::Store, [](const Graph& g, const Node& n) {
    if (n.inputs.size() != 2) shape_fail(g, n, "tier_store writes a buffer (input 0) into a tiered value (input 1)");
    if (in_shape(g, n, 0) != in_shape(g, n, 1) || in_dtype(g, n, 0) != in_dtype(g, n, 1))
      shape_fail(g, n, "tier_store's buffer and tiered value differ in shape or type");
    return std::vector<ValueMeta>{};
  });
  register_tier_op("tier_wait", OpTraits::TierIo::Wait, [](const Graph& g, const Node& n) {
    if (n.inputs.size() != 1) shape_fail(g, n, "tier_wait waits for one buffer's queued copies");
    return std::vector<ValueMeta>{};
  });
}

}  // namespace memfit
