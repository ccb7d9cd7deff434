// Helpers shared by the fast CPU lowering files.
#pragma once

#include <optional>

#include "runtime/kernel_table.hpp"

namespace memfit {

// The fast CPU kernels store activations in f32 or bf16 (parameters,
// their gradients and statistics are f32 either way). The activation type of
// a node: F32 if every float operand is f32, BF16 if the others are bf16;
// nullopt for f16 (no f16 arithmetic on the CPU: runtime/mixed.hpp converts
// around the f32 kernel instead).
inline std::optional<kernels::ElemType> cpu_act(const Graph& g, const Node& n) {
  kernels::ElemType act = kernels::ElemType::F32;
  for (const auto* vs : {&n.inputs, &n.outputs})
    for (ValueId v : *vs) {
      const DType t = g.value(v).dtype;
      if (t == DType::f16) return std::nullopt;
      if (t == DType::bf16) act = kernels::ElemType::BF16;
    }
  return act;
}

// True if every float input and output of the node is f32 (kernels that have
// no bf16 variant: the optimizer, fill, matmul).
inline bool all_f32(const Graph& g, const Node& n) { return cpu_act(g, n) == kernels::ElemType::F32; }

}  // namespace memfit
