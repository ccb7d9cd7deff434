// Helpers shared by the lowering files.
#pragma once

#include <memory>

#include "runtime/device.hpp"
#include "runtime/kernel_table.hpp"

namespace memfit {

// True where lg's device stores every float wide (the double reference):
// its reference kernels compute in double.
inline bool wide(const LoweredGraph& lg) { return lg.device().wide_floats(); }

// Instantiates a reference kernel template for the element type of lg's
// device: double where it stores floats wide, else float (the f32
// reference, and the CPU where no fast kernel takes a node).
template <template <class> class K, class P>
std::unique_ptr<kernels::Kernel> make_ref(const LoweredGraph& lg, const P& p) {
  if (wide(lg)) return std::make_unique<K<double>>(p);
  return std::make_unique<K<float>>(p);
}

}  // namespace memfit
