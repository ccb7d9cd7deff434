// Lowering: graph node -> kernel. One registration per op, covering every
// backend; each op family lowers in its own file under runtime/lower/.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "kernels/kernel.hpp"
#include "memfit/graph.hpp"
#include "memfit/runtime.hpp"

namespace memfit {

using KernelFactory = std::function<std::unique_ptr<kernels::Kernel>(const Graph&, const Node&, Backend)>;

// Reference lowering: serves Reference and Reference64, and Cpu where no fast
// kernel is registered (runtime/lower/).
void register_kernel(const std::string& op, KernelFactory f);
// Fast CPU lowering (oneDNN or hand-written): serves Backend::Cpu
// (runtime/lower_cpu/). The factory may return nullptr to fall back to the
// reference kernel for shapes it does not handle.
void register_cpu_kernel(const std::string& op, KernelFactory f);
// True if a fast CPU kernel is registered for the op.
bool has_cpu_kernel(const std::string& op);
// True if a reference lowering is registered for the op.
bool has_reference_kernel(const std::string& op);
// nullptr for ops that need no kernel (views). Throws if the op has no lowering.
std::unique_ptr<kernels::Kernel> make_kernel(const Graph& g, const Node& n, Backend b);

// Helpers for lowering files.
inline const Shape& shape_of(const Graph& g, ValueId v) { return g.value(v).shape; }

}  // namespace memfit
