// Parameter struct of the permute family, shared by the reference kernel
// (ops/permute/ref.hpp) and the fast CPU kernel (ops/permute/cpu.hpp).
#pragma once

#include <cstdint>
#include <vector>

namespace memfit::kernels {

// permute  in: x[dims]   out: y with y's axis i = x's axis perm[i]
//   (y[j_0, ..., j_{r-1}] = x[i] with i_{perm[k]} = j_k). Pure data movement:
//   any element type.
struct PermuteParams {
  std::vector<int64_t> dims, perm;
};

}  // namespace memfit::kernels
