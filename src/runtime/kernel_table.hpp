// Lowering: graph node -> kernel. One registration per op and table; each op
// family lowers in its own folder, ops/<family>/lower.cpp (reference) and
// ops/<family>/lower_cpu.cpp (fast CPU). A factory gets the graph's lowering context
// (runtime/lowered.hpp: graph, backend, layouts, product path) and the node.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernel.hpp"
#include "memfit/graph.hpp"
#include "memfit/runtime.hpp"
#include "runtime/lowered.hpp"

namespace memfit {

using KernelFactory = std::function<std::unique_ptr<kernels::Kernel>(const LoweredGraph&, NodeId)>;

// Reference lowering: serves the reference devices, and the CPU device where
// no fast kernel is registered or takes the node (ops/<family>/lower.cpp).
void register_kernel(const std::string& op, KernelFactory f);
// Whether a fast CPU factory takes a node (gives it a kernel, in whatever
// layout), by the factory's own condition beyond the activation type.
using KernelCondition = std::function<bool(const Graph&, const Node&)>;
// Fast CPU lowering (oneDNN or hand-written): serves the CPU device
// (ops/<family>/lower_cpu.cpp). The factory may return nullptr to fall back to the
// reference kernel for shapes it does not handle; `takes` states that
// condition where the channel-blocked layouts depend on it (the layouts are
// chosen before any kernel is made: runtime/lower_cpu/layout.cpp).
void register_cpu_kernel(const std::string& op, KernelFactory f, KernelCondition takes = {});
// CUDA lowering (ops/<family>/lower_cuda.cpp): serves the CUDA device; an op
// without one is refused there, naming it (no host fallback: the arenas are
// device memory). A factory returning nullptr marks a node that needs no
// kernel (a view).
void register_cuda_kernel(const std::string& op, KernelFactory f);
const KernelFactory* find_cuda_kernel(const std::string& op);
// The ops with a CUDA lowering, sorted (for errors and the docs).
std::vector<std::string> cuda_kernel_ops();
// The registered condition of n's fast CPU factory (true where none is).
bool cpu_kernel_takes(const Graph& g, const Node& n);
// True if a fast CPU kernel is registered for the op.
bool has_cpu_kernel(const std::string& op);
// True if a reference lowering is registered for the op.
bool has_reference_kernel(const std::string& op);
// The registered factories (nullptr if none).
const KernelFactory* find_reference_kernel(const std::string& op);
const KernelFactory* find_cpu_kernel(const std::string& op);

// The reference kernel of node id; for a low-precision node whose device
// does not store every float wide, and whose op does not convert types
// itself, the f32 kernel of the f32 view wrapped in conversions
// (runtime/mixed.hpp). `fast`, if given, is tried first on the view (a fast
// f32 kernel with plain layouts). Throws if the op has no reference lowering.
std::unique_ptr<kernels::Kernel> make_reference_kernel(const LoweredGraph& lg, NodeId id, const KernelFactory* fast);

// One node's kernel on the device `b` names, from a lowering context of its
// own (tests, benchmarks; an executor lowers a whole graph with one).
// nullptr for ops that need no kernel (views).
std::unique_ptr<kernels::Kernel> make_kernel(const Graph& g, const Node& n, Backend b);

// Helpers for lowering files.
inline const Shape& shape_of(const Graph& g, ValueId v) { return g.value(v).shape; }

}  // namespace memfit
