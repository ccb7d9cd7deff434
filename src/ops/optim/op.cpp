// Optimizer update nodes: in place over parameters and optimizer state, no outputs.
#include "ops/common/op_common.hpp"

namespace memfit {

void register_optim_ops() {
  for (const char* name : {"sgd_update", "adam_update", "adafactor_update"}) {
    OpDef d;
    d.name = name;
    d.traits.no_gradient = true;
    // bf16 and 8-bit state are the kernels' own formats (the parameters and
    // gradients stay f32): never wrapped in conversions.
    d.traits.converts_types = true;
    d.traits.updates_parameters = true;
    d.infer = [](const Graph&, const Node&) { return std::vector<ValueMeta>{}; };
    register_op(d);
  }
  // grad_accumulate(acc, g): acc = g on micro-batch 0, acc += g after (in place;
  // a bf16 acc rounds the f32 sum stochastically, attr param names its stream).
  OpDef acc;
  acc.name = "grad_accumulate";
  acc.traits.no_gradient = true;
  // The CPU kernel takes a bf16 accumulator; an f32 one falls back to the
  // reference's add (one element-wise add per step, in place).
  acc.traits.accumulates_gradients = true;
  // A bf16 accumulator (accumulated gradients kept in bf16) takes the f32
  // micro-batch gradient as it is: its kernels' own formats.
  acc.traits.converts_types = true;
  acc.infer = [](const Graph& g, const Node& n) {
    if (g.value(n.inputs[0]).shape != g.value(n.inputs[1]).shape) shape_fail(g, n, "accumulator and gradient differ");
    const DType a = g.value(n.inputs[0]).dtype;
    if ((a != DType::f32 && a != DType::bf16) || g.value(n.inputs[1]).dtype != DType::f32)
      shape_fail(g, n, "adds an f32 gradient into an f32 or bf16 accumulator");
    return std::vector<ValueMeta>{};
  };
  register_op(acc);
  // grad_reduce(g): the ranks' sum of a gradient into its owner's (attr
  // root), in place (gradient sharding; memfit/optim.hpp shard_gradients).
  OpDef red;
  red.name = "grad_reduce";
  red.traits.no_gradient = true;
  red.traits.converts_types = true;  // f32 gradients, never wrapped in conversions
  red.traits.reference_serves_cpu = true;  // an MPI call on the buffer
  red.traits.reduces_across_ranks = true;
  red.infer = [](const Graph& g, const Node& n) {
    if (n.inputs.size() != 1 || g.value(n.inputs[0]).dtype != DType::f32) shape_fail(g, n, "expects one f32 gradient");
    return std::vector<ValueMeta>{};
  };
  register_op(red);
}

}  // namespace memfit
