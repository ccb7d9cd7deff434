// Kernel parameters of a binary or binary_bwd node, shared by the reference
// lowering (ops/binary/lower.cpp) and the fast CPU lowering
// (ops/binary/lower_cpu.cpp). The op's infer has checked the attributes.
#pragma once

#include "memfit/graph.hpp"
#include "ops/binary/params.hpp"

namespace memfit {

inline kernels::BinaryParams binary_params(const Graph& g, const Node& n) {
  using kernels::BinaryKind;
  const std::string& k = n.attrs.s("kind");
  const BinaryKind kind = k == "add" ? BinaryKind::Add : k == "sub" ? BinaryKind::Sub : k == "mul" ? BinaryKind::Mul : BinaryKind::Div;
  return kernels::make_binary_params(kind, g.value(n.inputs[0]).shape, g.value(n.inputs[1]).shape,
                                     n.op == "binary_bwd" ? static_cast<int>(n.attrs.i("wrt")) : 0);
}

}  // namespace memfit
