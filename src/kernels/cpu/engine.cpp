#include "kernels/cpu/engine.hpp"

#include "kernels/cpu/bf16_simd.hpp"

namespace memfit::kernels::cpu {

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& stream() {
  static dnnl::stream s(engine());
  return s;
}

bool bf16_kernels_available() { return MEMFIT_BF16_SIMD != 0; }

void drop_primitive_cache() {
  const int cap = dnnl::get_primitive_cache_capacity();
  dnnl::set_primitive_cache_capacity(0);
  dnnl::set_primitive_cache_capacity(cap);
}

}  // namespace memfit::kernels::cpu
