// Which activations the fast CPU kernels keep channel-blocked (nChw16c,
// kernels/cpu/layout.hpp) instead of plain NCHW.
//
// A value is blocked when it is a 4-D f32 transient with a channel count that
// is a multiple of 16, is not a graph output, and every node that reads or
// writes it is a fast CPU kernel that takes that operand blocked (as its
// lower_cpu.cpp registers: register_cpu_layouts): convolutions (activation
// operands), batch norm, global average pooling and the element-wise ops. Element-wise ops and batch norm need all their
// activation operands in one layout, so the decision is made per set of
// values they connect. Anything else touching a value (a view, a linear
// layer, a reference kernel, the caller reading an output) keeps it plain.
//
// The decision is a pure function of the graph, computed once per graph by
// the CPU device into its part of the lowering context (CpuLowering,
// runtime/lower_cpu/cpu_lowering.hpp), which every CPU factory reads; ExecConfig::blocked_layouts = false makes every value
// plain, and so does the f32 view converted low-precision nodes are made
// from. A blocked value is only meaningful to the kernels that produce and
// consume it: Executor::read_f32 of one returns nChw16c data (graph outputs
// are never blocked).
#pragma once

#include <memory>
#include <vector>

#include "kernels/cpu/layout.hpp"
#include "kernels/kernel.hpp"
#include "memfit/graph.hpp"

namespace memfit {

// The layout of every value (Plain for all but 4-D activations), with
// blocking on.
std::vector<kernels::cpu::Layout> cpu_layouts(const Graph& g);

// Returns k; throws std::logic_error if it is null although the node has a
// blocked operand (the reference kernel it would fall back to reads plain
// data only; cpu_layouts() counts on the fast kernel).
std::unique_ptr<kernels::Kernel> blocked_checked(std::unique_ptr<kernels::Kernel> k, bool any_blocked, const Graph& g,
                                                 const Node& n);

}  // namespace memfit
