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

}  // namespace memfit::kernels::cpu
