// Lowering: graph node -> kernel. Each device has its kernel table, one
// factory per op; each op family lowers in its own folder,
// ops/<family>/lower.cpp (reference), lower_cpu.cpp (fast CPU),
// lower_cuda.cpp (CUDA). A factory gets the graph's lowering context
// (runtime/lowered.hpp: graph, backend, layouts, product path) and the node.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernel.hpp"
#include "memfit/graph.hpp"
#include "memfit/runtime.hpp"
#include "runtime/lowered.hpp"

namespace memfit {

using KernelFactory = std::function<std::unique_ptr<kernels::Kernel>(const LoweredGraph&, NodeId)>;
// Whether a fast CPU factory takes a node (gives it a kernel, in whatever
// layout), by the factory's own condition beyond the activation type.
using KernelCondition = std::function<bool(const Graph&, const Node&)>;

// Which activation operands (input and output positions) a device's
// kernels for an op take in the device's own layout as well as plain (the
// CPU's channel-blocked nChw16c: runtime/lower_cpu/layout.hpp); `same`: all
// of them must share one layout. Empty: plain only.
struct OperandLayouts {
  std::vector<size_t> ins, outs;
  bool same = false;
  bool any() const { return !ins.empty() || !outs.empty(); }
};

// One device's kernels: a factory per op, and where the device's lowering
// needs them before any kernel is made, the condition under which the
// factory takes a node and the operands it takes in the device's layout.
class KernelTable {
 public:
  void add(const std::string& op, KernelFactory f, KernelCondition takes = {});
  void set_layouts(const std::string& op, OperandLayouts l);
  const KernelFactory* find(const std::string& op) const;
  // The op's condition for n (true where it has none).
  bool takes(const Graph& g, const Node& n) const;
  // The op's operands in the device's layout (nullptr: plain only).
  const OperandLayouts* layouts(const std::string& op) const;
  std::vector<std::string> ops() const;  // sorted

 private:
  std::map<std::string, KernelFactory> factories_;
  std::map<std::string, KernelCondition> conditions_;
  std::map<std::string, OperandLayouts> layouts_;
};

// The kernel tables by name: "reference" (the scalar oracle's, which also
// serves the CPU where its own table has no kernel or its kernel declines
// the node), "cpu", "cuda", and one a new device registers into
// (register_device_kernel; a name not seen is an empty table). The built-in
// families' kernels are in them before the first is returned.
const KernelTable& kernel_table(const std::string& name);
// A device's own kernel: op's factory in table `table`. Register before the
// first plan.
void register_device_kernel(const std::string& table, const std::string& op, KernelFactory f,
                            KernelCondition takes = {});

// The built-in tables' registrations (the families' lowering files):
// Reference lowering: serves the reference devices, and the CPU device where
// no fast kernel is registered or takes the node (ops/<family>/lower.cpp).
void register_kernel(const std::string& op, KernelFactory f);
// Fast CPU lowering (oneDNN or hand-written): serves the CPU device
// (ops/<family>/lower_cpu.cpp). The factory may return nullptr to fall back to the
// reference kernel for shapes it does not handle; `takes` states that
// condition where the channel-blocked layouts depend on it (the layouts are
// chosen before any kernel is made: runtime/lower_cpu/layout.cpp).
void register_cpu_kernel(const std::string& op, KernelFactory f, KernelCondition takes = {});
// The operands the CPU's kernels for op take channel-blocked (the op's
// lower_cpu.cpp; an op whose one element-wise lowering serves every device,
// cast, without a CPU factory of its own).
void register_cpu_layouts(const std::string& op, OperandLayouts l);
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
