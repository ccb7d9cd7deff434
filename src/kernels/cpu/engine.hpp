// The process-wide oneDNN CPU engine and stream.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

namespace memfit::kernels::cpu {

dnnl::engine& engine();
dnnl::stream& stream();

// Drops oneDNN's cache of created primitives (their JIT code): a fit search
// creates primitives for many plans that will not run, and their code would
// otherwise stay in the process's memory. Kernels keep their own primitives.
void drop_primitive_cache();

// True if this build has the hand-written bf16 kernels (they need AVX-512;
// a build for another target, such as the sanitizer build, has none, and
// bf16 nodes then run as f32 kernels between conversions).
bool bf16_kernels_available();

}  // namespace memfit::kernels::cpu
