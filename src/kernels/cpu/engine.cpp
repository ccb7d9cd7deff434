#include "kernels/cpu/engine.hpp"

namespace memfit::kernels::cpu {

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& stream() {
  static dnnl::stream s(engine());
  return s;
}

void warm_up_library() {
  constexpr dnnl_dim_t n = 64;
  static float a[n * n], b[n * n], c[n * n];
  dnnl_sgemm('N', 'N', n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
}

}  // namespace memfit::kernels::cpu
