// The process-wide oneDNN CPU engine and stream.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

namespace memfit::kernels::cpu {

dnnl::engine& engine();
dnnl::stream& stream();

// Makes oneDNN build what it otherwise builds on first use inside a step:
// the JIT code of its f32 gemm (packing and compute kernels, a few MiB,
// made once per process by the first gemm call). Called before the
// process baseline is measured, so that the baseline includes it.
void warm_up_library();

}  // namespace memfit::kernels::cpu
