// Threading threshold for the hand-written loops: below this many elements a
// loop runs on the calling thread (forking a team costs more than it saves).
#pragma once

#include <cstdint>

namespace memfit::kernels::cpu {

constexpr int64_t kParallelMin = int64_t(1) << 15;

}  // namespace memfit::kernels::cpu
