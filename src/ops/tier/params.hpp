// Parameters of the tier kernels: which block of the tier, and its bytes as
// the device stores the value.
#pragma once

#include <cstddef>
#include <string>

namespace memfit::kernels {

struct TierParams {
  std::string block;  // the tiered value's name
  size_t bytes = 0;
  // Queued on the tier's I/O thread (a tier_wait on the buffer follows)
  // rather than copied at once.
  bool async = false;
};

}  // namespace memfit::kernels
