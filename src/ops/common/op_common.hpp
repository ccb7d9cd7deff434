// Shared helpers for op definition files.
#pragma once

#include "memfit/graph.hpp"
#include "memfit/op_registry.hpp"

namespace memfit {

inline const Shape& in_shape(const Graph& g, const Node& n, size_t i) {
  return g.value(n.inputs.at(i)).shape;
}
inline DType in_dtype(const Graph& g, const Node& n, size_t i) { return g.value(n.inputs.at(i)).dtype; }

// The type of the gradient of v: f32 for a parameter and for a slice, view
// or permutation of one (bf16 master weights are updated from f32
// gradients, and an f32 weight's gradient stays f32 under bf16
// activations), else v's own type.
inline DType grad_dtype(const Graph& g, ValueId v) {
  ValueId at = v;
  for (int hops = 0; hops < 8; ++hops) {
    const Value& x = g.value(at);
    if (x.cls == VClass::Param) return DType::f32;
    if (x.producer < 0) break;
    const Node& p = g.node(x.producer);
    if (!op_def(p.op).traits.rearranges_input || p.inputs.empty()) break;
    at = p.inputs[0];
  }
  return g.value(v).dtype;
}

// Output 0 has the shape and dtype of input `i`.
inline std::vector<ValueMeta> same_as(const Graph& g, const Node& n, size_t i) {
  return {{in_shape(g, n, i), in_dtype(g, n, i)}};
}

// Op whose output has the shape of input 0; not differentiable unless a
// gradient rule is added (then no_gradient is cleared).
inline OpDef simple_op(const std::string& name, int inplace = -1) {
  OpDef d;
  d.name = name;
  d.traits.no_gradient = true;
  d.infer = [](const Graph& g, const Node& n) { return same_as(g, n, 0); };
  d.traits.inplace_input = inplace;
  return d;
}

}  // namespace memfit
