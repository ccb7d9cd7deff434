#include "kernels/ref/linear.hpp"
#include "runtime/lower/lower_util.hpp"
#include "runtime/lower/params_of.hpp"

namespace memfit {

void register_matmul_kernels() {
  register_kernel("matmul", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Backend b = lg.backend();
    const kernels::MatmulParams p = matmul_params(g, n);
    return make_ref<kernels::ref::Matmul>(b, p);
  });
}

}  // namespace memfit
