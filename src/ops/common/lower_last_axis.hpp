// Lowering helpers of the ops over the last axis (layer_norm, gelu, softmax
// and their backward ops): each family's lower.cpp and lower_cpu.cpp
// registers its ops through them.
#pragma once

#include <memory>
#include <string>

#include "runtime/lower/lower_util.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"

namespace memfit {

// op lowers to reference kernel K made from params(g, n).
template <template <class> class K, class P>
void lower_last_axis_ref(const std::string& op, P (*params)(const Graph&, const Node&)) {
  register_kernel(op, [params](const LoweredGraph& lg, NodeId id) {
    return make_ref<K>(lg, params(lg.graph(), lg.node(id)));
  });
}

// op lowers to make(params(g, n), activation type) for f32 or bf16
// activations; f16, or bf16 in a build without the bf16 loops, falls back to
// the reference kernel between conversions (runtime/mixed.hpp). The operands
// are always plain (no register_cpu_layouts).
template <class P>
void lower_last_axis_cpu(const std::string& op, P (*params)(const Graph&, const Node&),
                         std::unique_ptr<kernels::Kernel> (*make)(const P&, kernels::ElemType)) {
  register_cpu_kernel(op, [params, make](const LoweredGraph& lg, NodeId id) -> std::unique_ptr<kernels::Kernel> {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const auto act = cpu_act(g, n);
    return act ? make(params(g, n), *act) : nullptr;
  });
}

}  // namespace memfit
