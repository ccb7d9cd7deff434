// Helpers shared by the lowering files.
#pragma once

#include <memory>

#include "runtime/kernel_table.hpp"

namespace memfit {

// Instantiates a reference kernel template for the backend's element type.
// Backend::Cpu falls back to the f32 reference where no fast kernel exists.
template <template <class> class K, class P>
std::unique_ptr<kernels::Kernel> make_ref(Backend b, const P& p) {
  if (b == Backend::Reference64) return std::make_unique<K<double>>(p);
  return std::make_unique<K<float>>(p);
}

}  // namespace memfit
