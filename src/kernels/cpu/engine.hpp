// The process-wide oneDNN CPU engine and stream.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

namespace memfit::kernels::cpu {

dnnl::engine& engine();
dnnl::stream& stream();

}  // namespace memfit::kernels::cpu
