// Kernel parameters of the optimizer updates from a graph node, shared by the
// reference lowering (ops/optim/lower.cpp) and the fast CPU lowering
// (ops/optim/lower_cpu.cpp) so the two cannot drift apart.
#pragma once

#include "kernels/optim_state.hpp"
#include "memfit/graph.hpp"
#include "ops/optim/params.hpp"

namespace memfit {

// Per-tensor sizes and weight decay and the clipping norm of an optimizer
// update node (SgdParams, AdamParams).
template <class P>
void fill_optimizer_params(const Graph& g, const Node& n, P& p) {
  const int64_t k = n.attrs.i("count");
  const auto& decay = n.attrs.ints("decay");
  for (int64_t t = 0; t < k; ++t) {
    p.sizes.push_back(numel(g.value(n.inputs[static_cast<size_t>(t)]).shape));
    p.weight_decay.push_back(decay[static_cast<size_t>(t)] ? n.attrs.f("weight_decay") : 0.0);
  }
  p.clip_norm = n.attrs.f("clip_norm", 0.0);
}

// The state format of an sgd/adam update node (attribute "state"; absent:
// fp32), with every state value checked against it: its type, and the
// shape of each 8-bit scale value. `moments`: the node's moment groups.
inline kernels::StateLayout state_layout(const Graph& g, const Node& n, size_t moments) {
  kernels::StateLayout s;
  const std::string fmt = n.attrs.has("state") ? n.attrs.s("state") : "fp32";
  const size_t k = static_cast<size_t>(n.attrs.i("count"));
  auto fail = [&](const std::string& what) -> void {
    throw GraphError("optimizer update (" + fmt + " state): " + what);
  };
  bool w16 = false, g16 = false;
  for (size_t t = 0; t < k; ++t) {
    w16 = w16 || g.value(n.inputs[t]).dtype == DType::bf16;
    g16 = g16 || g.value(n.inputs[k + t]).dtype == DType::bf16;
  }
  if (w16 || g16)
    for (size_t t = 0; t < k; ++t) {
      const DType pt = g.value(n.inputs[t]).dtype, gt = g.value(n.inputs[k + t]).dtype;
      if ((pt != DType::f32 && pt != DType::bf16) || (gt != DType::f32 && gt != DType::bf16))
        fail("parameter '" + g.value(n.inputs[t]).name + "' is " + dtype_name(pt) + " with a " + dtype_name(gt) +
             " gradient (the kernels take f32 or bf16 parameters and gradients)");
      if (w16) s.bf16_weights.push_back(pt == DType::bf16);
      if (g16) s.bf16_grads.push_back(gt == DType::bf16);
      s.names.push_back(g.value(n.inputs[t]).name);
    }
  if (fmt == "fp32") return s;
  if (fmt != "bf16" && fmt != "8bit") fail("unknown state format");
  if (moments == 0) return s;
  s.format = fmt == "bf16" ? kernels::StateFormat::BF16 : kernels::StateFormat::Q8;
  if (s.format == kernels::StateFormat::Q8) {
    if (n.attrs.i("block") != kernels::qstate::kQuantBlock)
      fail("blocks of " + std::to_string(n.attrs.i("block")) + " elements; the kernels use " +
           std::to_string(kernels::qstate::kQuantBlock));
    for (int64_t b : n.attrs.ints("blockwise")) s.blockwise.push_back(b != 0);
    if (s.blockwise.size() != k || n.inputs.size() != (3 + moments) * k) fail("inputs do not match the layout");
  } else if (n.inputs.size() != (2 + moments) * k) {
    fail("inputs do not match the layout");
  }
  for (size_t t = 0; t < k; ++t) {
    const Value& p = g.value(n.inputs[t]);
    if (!w16 && !g16) s.names.push_back(p.name);
    const bool q = s.format == kernels::StateFormat::Q8 && s.blockwise[t];
    for (size_t m = 0; m < moments; ++m) {
      const Value& v = g.value(n.inputs[(2 + m) * k + t]);
      const DType want = s.format == kernels::StateFormat::BF16 ? DType::bf16 : q ? DType::u8 : DType::f32;
      if (v.dtype != want || v.shape != p.shape) fail("state '" + v.name + "' is not " + dtype_name(want) + " " + shape_str(p.shape));
    }
    if (q) {
      const Value& sc = g.value(n.inputs[(2 + moments) * k + t]);
      const Shape want{static_cast<int64_t>(moments), kernels::qstate::blocks_of(numel(p.shape))};
      if (sc.dtype != DType::f32 || sc.shape != want) fail("scales '" + sc.name + "' are not f32 " + shape_str(want));
    }
  }
  return s;
}

// An adam_update node's parameters (AdamParams), its state layout included.
inline void fill_adam_params(const Graph& g, const Node& n, kernels::AdamParams& p) {
  fill_optimizer_params(g, n, p);
  p.beta1 = n.attrs.f("beta1");
  p.beta2 = n.attrs.f("beta2");
  p.eps = n.attrs.f("eps");
  p.decoupled = n.attrs.s("kind") == "adamw";
  p.state = state_layout(g, n, 2);
}

// An adafactor_update node's parameters, its factored shapes checked.
inline void fill_adafactor_params(const Graph& g, const Node& n, kernels::AdafactorParams& p) {
  fill_optimizer_params(g, n, p);
  const size_t k = p.sizes.size();
  p.rows = n.attrs.ints("rows");
  if (p.rows.size() != k || n.inputs.size() != 4 * k) throw GraphError("adafactor update: inputs do not match the layout");
  for (size_t t = 0; t < k; ++t) {
    const int64_t R = p.rows[t], sz = p.sizes[t];
    const Value& r = g.value(n.inputs[2 * k + t]);
    const Value& c = g.value(n.inputs[3 * k + t]);
    const bool ok = R ? R > 0 && sz % R == 0 && numel(r.shape) == R && numel(c.shape) == sz / R : numel(r.shape) == sz;
    if (!ok) throw GraphError("adafactor update: the state of '" + g.value(n.inputs[t]).name + "' does not match its rows");
  }
  p.eps1 = n.attrs.f("eps1");
  p.eps2 = n.attrs.f("eps2");
  p.clip_threshold = n.attrs.f("clip_threshold");
  p.decay_rate = n.attrs.f("decay_rate");
  p.relative_step = n.attrs.i("relative_step") != 0;
}

// grad_accumulate_matmul's and grad_accumulate_rows' parameters (the
// shapes were checked by the ops' inference).
inline kernels::AccumulateMatmulParams accumulate_matmul_params(const Graph& g, const Node& n) {
  kernels::AccumulateMatmulParams p;
  const Shape& c = g.value(n.inputs.at(0)).shape;
  const Shape& a = g.value(n.inputs.at(1)).shape;
  p.M = c[0];
  p.N = c[1];
  p.trans_a = n.attrs.i("trans_a", 0) != 0;
  p.trans_b = n.attrs.i("trans_b", 0) != 0;
  p.K = p.trans_a ? a[0] : a[1];
  p.param = n.attrs.s("param");
  p.first = n.attrs.i("first", 1) != 0;
  p.part = static_cast<uint64_t>(n.attrs.i("part", 0));
  return p;
}
inline kernels::AccumulateRowsParams accumulate_rows_params(const Graph& g, const Node& n) {
  kernels::AccumulateRowsParams p;
  const Shape& t = g.value(n.inputs.at(0)).shape;
  p.V = t[0];
  p.D = t[1];
  p.n = numel(g.value(n.inputs.at(1)).shape);
  p.param = n.attrs.s("param");
  p.first = n.attrs.i("first", 0) != 0;
  p.part = static_cast<uint64_t>(n.attrs.i("part", 0));
  return p;
}

}  // namespace memfit
