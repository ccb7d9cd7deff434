// Parameters of the tier kernels: which block of the tier, and its bytes as
// the device stores the value.
#pragma once

#include <cstddef>
#include <string>

namespace memfit::kernels {

struct TierParams {
  std::string block;  // the tiered value's name
  size_t bytes = 0;
};

}  // namespace memfit::kernels
