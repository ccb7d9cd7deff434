// Low-precision storage (bf16, f16) for kernels that compute in f32 only.
//
// A node with a bf16 or f16 float operand and no kernel of its own for that
// type runs as its f32 kernel (reference, or fast CPU with plain layouts)
// made for an f32 copy of the graph, wrapped by a converting kernel: before
// the inner kernel runs, each low-precision input is widened into an f32
// shadow in the node's scratch; afterwards each f32 output shadow is rounded
// (nearest even) into the low-precision output. Parameter operands of
// convolutions and linear layers (f32 masters) are rounded through the
// node's low-precision type on the way in, so that every backend multiplies
// with the same rounded weights (kernels/cpu's bf16 kernels do the same).
// This is the semantics every low-precision kernel keeps: compute in f32 from
// the exact values of the inputs, round each output element once.
#pragma once

#include <memory>

#include "kernels/kernel.hpp"
#include "memfit/graph.hpp"
#include "memfit/runtime.hpp"
#include "runtime/lowered.hpp"

namespace memfit {

// The node's first bf16/f16 float operand type, or f32 if it has none.
DType low_precision_type(const Graph& g, const Node& n);

// g with every bf16/f16 value retyped f32 (the inner kernels' view).
std::unique_ptr<Graph> f32_view(const Graph& g);

// Wraps `inner` (made from f32view's copy of node n) in the converting
// kernel described above. Returns nullptr if inner is nullptr (views).
std::unique_ptr<kernels::Kernel> wrap_low_precision(const Graph& g, const Node& n, std::unique_ptr<kernels::Kernel> inner);

// The cast op's kernel (every device; in double where the device stores
// floats wide).
std::unique_ptr<kernels::Kernel> make_cast_kernel(const LoweredGraph& lg, NodeId id);


}  // namespace memfit
