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
  if (s.format != kernels::StateFormat::F32 || s.any_bf16_weights() || s.any_bf16_grads())
    throw std::runtime_error(n.op + " on the CUDA device keeps f32 parameters, gradients and optimizer state so far "
                             "(--optimizer-state fp32 --master-weights fp32 --accumulated-grads fp32)");
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
    const Value& acc = lg.graph().value(lg.node(id).inputs[0]);
    if (acc.dtype != DType::f32)
      throw std::runtime_error("grad_accumulate on the CUDA device keeps f32 accumulated gradients so far "
                               "(--accumulated-grads fp32); '" + acc.name + "' is " + dtype_name(acc.dtype));
    return kernels::cuda::grad_accumulate(numel(acc.shape));
  });
  register_cuda_kernel("adam_update", [](const LoweredGraph& lg, NodeId id) {
    kernels::AdamParams p;
    fill_adam_params(lg.graph(), lg.node(id), p);
    require_f32_state(p.state, lg.node(id));
    return kernels::cuda::adam_update(p);
  });
}

}  // namespace memfit
