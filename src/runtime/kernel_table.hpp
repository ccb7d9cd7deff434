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

void register_kernel(const std::string& op, KernelFactory f);
// nullptr for ops that need no kernel (views). Throws if the op has no lowering.
std::unique_ptr<kernels::Kernel> make_kernel(const Graph& g, const Node& n, Backend b);

// Helpers for lowering files.
inline const Shape& shape_of(const Graph& g, ValueId v) { return g.value(v).shape; }

}  // namespace memfit
