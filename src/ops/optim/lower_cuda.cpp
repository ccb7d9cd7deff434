// CUDA lowering of the optimizer updates: SGD and Adam/AdamW with f32 state
// and f32 parameters (compact state, bf16 master weights, Adafactor and the
// data-parallel reductions have no CUDA kernel yet and are refused, naming
// what to use instead).
#include <stdexcept>

#include "ops/optim/cuda.hpp"
#include "ops/optim/params_of.hpp"
#include "runtime/kernel_table.hpp"

namespace memfit {
namespace {

void require_f32_state(const kernels::StateLayout& s, const Node& n) {
  if (s.format != kernels::StateFormat::F32 || s.any_bf16_weights())
    throw std::runtime_error(n.op + " on the CUDA device keeps f32 parameters and f32 optimizer state so far "
                             "(--optimizer-state fp32 --master-weights fp32)");
}

}  // namespace

void register_optim_cuda_kernels() {
  register_cuda_kernel("sgd_update", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    kernels::SgdParams p;
    fill_optimizer_params(g, n, p);
    p.momentum = n.attrs.f("momentum");
    p.nesterov = n.attrs.i("nesterov") != 0;
    p.state = state_layout(g, n, p.momentum != 0.0 ? 1 : 0);
    require_f32_state(p.state, n);
    return kernels::cuda::sgd_update(p);
  });
  register_cuda_kernel("grad_accumulate", [](const LoweredGraph& lg, NodeId id) {
    return kernels::cuda::grad_accumulate(numel(lg.graph().value(lg.node(id).inputs[0]).shape));
  });
  register_cuda_kernel("adam_update", [](const LoweredGraph& lg, NodeId id) {
    kernels::AdamParams p;
    fill_adam_params(lg.graph(), lg.node(id), p);
    require_f32_state(p.state, lg.node(id));
    return kernels::cuda::adam_update(p);
  });
}

}  // namespace memfit
