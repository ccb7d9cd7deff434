// Optimizer update nodes: in place over parameters and optimizer state, no outputs.
#include <algorithm>

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
  // The CPU kernels: f32 (a copy, then one add: the reference's bytes) and
  // bf16 accumulators.
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
  // Accumulation fused into the op that makes a micro-batch's gradient
  // (autodiff/accumulate.cpp puts them in place of that op and its
  // grad_accumulate where the accumulator is bf16), so that the f32
  // micro-batch gradient is never held whole: a tied [vocab, D] table's
  // would be the largest buffer of a language model's backward. Attrs:
  // param (the rounding stream), first (1: on micro-batch 0 this node
  // writes the accumulator, not adds into it), part (the rounding stream's
  // number among the node's siblings on one accumulator).
  //
  // grad_accumulate_matmul(acc, a, b): acc (+)= op(a) op(b) (attrs trans_a,
  // trans_b), the product in f32, each sum rounded to bf16 stochastically.
  OpDef amm;
  amm.name = "grad_accumulate_matmul";
  amm.traits = acc.traits;
  amm.traits.heavy = true;
  amm.infer = [](const Graph& g, const Node& n) {
    if (n.inputs.size() != 3) shape_fail(g, n, "grad_accumulate_matmul takes acc, a and b");
    const Shape& c = in_shape(g, n, 0);
    const Shape& a = in_shape(g, n, 1);
    const Shape& b = in_shape(g, n, 2);
    if (in_dtype(g, n, 0) != DType::bf16 || in_dtype(g, n, 1) != DType::f32 || in_dtype(g, n, 2) != DType::f32)
      shape_fail(g, n, "adds an f32 product into a bf16 accumulator");
    if (c.size() != 2 || a.size() != 2 || b.size() != 2) shape_fail(g, n, "acc, a and b are matrices");
    const bool ta = n.attrs.i("trans_a", 0), tb = n.attrs.i("trans_b", 0);
    const int64_t m = ta ? a[1] : a[0], ka = ta ? a[0] : a[1], kb = tb ? b[1] : b[0], nn = tb ? b[0] : b[1];
    if (ka != kb || m != c[0] || nn != c[1])
      shape_fail(g, n, "op(a) " + shape_str({m, ka}) + " x op(b) " + shape_str({kb, nn}) + " is not the accumulator's " +
                           shape_str(c));
    return std::vector<ValueMeta>{};
  };
  amm.flops = [](const Graph& g, const Node& n) {
    const Shape& a = in_shape(g, n, 1);
    return 2.0 * static_cast<double>(numel(in_shape(g, n, 0))) * static_cast<double>(n.attrs.i("trans_a", 0) ? a[0] : a[1]);
  };
  register_op(amm);
  // grad_accumulate_rows(acc, ids, dy): acc[ids[i]] (+)= dy[i] (an
  // embedding's gradient), the rows of one id summed in f32 in the order of
  // their positions, then added once and rounded to bf16 stochastically;
  // ids outside [0, vocab) are skipped, as embedding_bwd does.
  OpDef arows;
  arows.name = "grad_accumulate_rows";
  arows.traits = acc.traits;
  arows.infer = [](const Graph& g, const Node& n) {
    if (n.inputs.size() != 3) shape_fail(g, n, "grad_accumulate_rows takes acc, ids and dy");
    const Shape& t = in_shape(g, n, 0);
    const Shape& ids = in_shape(g, n, 1);
    const Shape& dy = in_shape(g, n, 2);
    if (in_dtype(g, n, 0) != DType::bf16 || t.size() != 2) shape_fail(g, n, "the accumulator is a bf16 [vocab, D] table");
    if (in_dtype(g, n, 1) != DType::i32 || in_dtype(g, n, 2) != DType::f32 || dy.size() != ids.size() + 1 ||
        !std::equal(ids.begin(), ids.end(), dy.begin()) || dy.back() != t[1])
      shape_fail(g, n, "needs i32 ids [...] and f32 dy [..., " + std::to_string(t[1]) + "], got " +
                           dtype_name(in_dtype(g, n, 1)) + " " + shape_str(ids) + " and " +
                           dtype_name(in_dtype(g, n, 2)) + " " + shape_str(dy));
    return std::vector<ValueMeta>{};
  };
  arows.flops = [](const Graph& g, const Node& n) { return static_cast<double>(numel(in_shape(g, n, 2))); };
  register_op(arows);
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
