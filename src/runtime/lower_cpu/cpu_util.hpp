// Helpers shared by the fast CPU lowering files.
#pragma once

#include <optional>
#include <string>

#include "kernels/cpu/engine.hpp"
#include "runtime/kernel_table.hpp"
#include "runtime/lower_cpu/cpu_lowering.hpp"
#include "runtime/mixed.hpp"

namespace memfit {

// A parameter stored in bf16 (--master-weights bf16).
inline bool bf16_weight(const Graph& g, ValueId v) {
  return g.value(v).cls == VClass::Param && g.value(v).dtype == DType::bf16;
}

// The fast CPU kernels store activations in f32 or bf16 (parameters,
// their gradients and statistics are f32 either way). The activation type of
// a node: F32 if every float operand is f32, BF16 if the others are bf16;
// nullopt for f16 (no f16 arithmetic on the CPU: runtime/mixed.hpp converts
// around the f32 kernel instead), and for bf16 in a build without the bf16
// kernels. A bf16 parameter (bf16 master weights) also gives nullopt, so
// that the node runs between conversions (runtime/mixed.hpp), unless the
// caller's kernel reads bf16 weights itself (weights_native): then the
// parameter does not count towards the activation type.
inline std::optional<kernels::ElemType> cpu_act(const Graph& g, const Node& n, bool weights_native = false) {
  kernels::ElemType act = kernels::ElemType::F32;
  for (const auto* vs : {&n.inputs, &n.outputs})
    for (ValueId v : *vs) {
      if (bf16_weight(g, v)) {
        if (!weights_native) return std::nullopt;
        continue;
      }
      const DType t = g.value(v).dtype;
      if (t == DType::f16) return std::nullopt;
      if (t == DType::bf16) {
        if (!kernels::cpu::bf16_kernels_available()) return std::nullopt;
        act = kernels::ElemType::BF16;
      }
    }
  return act;
}

// True if every float input and output of the node is f32 (kernels that have
// no bf16 variant: the optimizer, fill, matmul).
inline bool all_f32(const Graph& g, const Node& n) { return cpu_act(g, n) == kernels::ElemType::F32; }

// Convolutions and linear layers with bf16 activations compute in bf16, or
// in f32 between conversions where this CPU runs f32 faster (the lowering
// context's bf16 product path, read once per graph from
// kernels::cpu::bf16_convs_native): the type to make their kernel for.
inline kernels::ElemType product_type(const LoweredGraph& lg, kernels::ElemType act) {
  return act == kernels::ElemType::BF16 && !bf16_products_native(lg) ? kernels::ElemType::F32 : act;
}

// k, made for storage type made_for (product_type()): wrapped in the
// conversions (runtime/mixed.hpp) when the node stores bf16 but k was made
// for f32. weights_native: k reads the node's bf16 weights itself, so they
// do not count as bf16 storage (the conversions would widen them).
inline std::unique_ptr<kernels::Kernel> converted(const Graph& g, const Node& n, kernels::ElemType made_for,
                                                  std::unique_ptr<kernels::Kernel> k, bool weights_native = false) {
  bool low = false;
  for (const auto* vs : {&n.inputs, &n.outputs})
    for (ValueId v : *vs) {
      if (weights_native && bf16_weight(g, v)) continue;
      const DType t = g.value(v).dtype;
      low = low || t == DType::bf16 || t == DType::f16;
    }
  if (k && made_for == kernels::ElemType::F32 && low) return wrap_low_precision(g, n, std::move(k));
  return k;
}

}  // namespace memfit
