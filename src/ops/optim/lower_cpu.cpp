#include "ops/optim/cpu.hpp"
#include "ops/optim/params_of.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"

namespace memfit {
namespace {

// The fast kernels take f32 or bf16 parameters (bf16 master weights) and
// f32 or bf16 gradients (bf16 accumulated gradients); their state may be
// f32, bf16 or 8-bit: the node's own format.
bool f32_params_and_grads(const Graph& g, const Node& n) {
  const size_t k = static_cast<size_t>(n.attrs.i("count"));
  for (size_t i = 0; i < 2 * k; ++i) {
    const DType t = g.value(n.inputs[i]).dtype;
    if (t != DType::f32 && t != DType::bf16) return false;
  }
  return true;
}

}  // namespace

void register_optim_cpu_kernels() {
  using KPtr = std::unique_ptr<kernels::Kernel>;
  register_cpu_kernel("sgd_update", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    if (!f32_params_and_grads(g, n)) return nullptr;
    kernels::SgdParams p;
    fill_optimizer_params(g, n, p);
    p.momentum = n.attrs.f("momentum");
    p.nesterov = n.attrs.i("nesterov") != 0;
    p.state = state_layout(g, n, p.momentum != 0.0 ? 1 : 0);
    return kernels::cpu::make_sgd_update(p);
  });
  register_cpu_kernel("adam_update", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    if (!f32_params_and_grads(g, n)) return nullptr;
    kernels::AdamParams p;
    fill_adam_params(g, n, p);
    return kernels::cpu::make_adam_update(p);
  });
  register_cpu_kernel("grad_accumulate", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Value& acc = g.value(n.inputs[0]);
    if (g.value(n.inputs[1]).dtype != DType::f32) return nullptr;
    if (acc.dtype == DType::f32) return kernels::cpu::make_grad_accumulate_f32(numel(acc.shape));
    if (acc.dtype != DType::bf16) return nullptr;
    return kernels::cpu::make_grad_accumulate_bf16(numel(acc.shape), n.attrs.s("param"));
  });
  register_cpu_kernel("grad_accumulate_matmul", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    return kernels::cpu::make_grad_accumulate_matmul(accumulate_matmul_params(lg.graph(), lg.node(id)));
  });
  register_cpu_kernel("grad_accumulate_rows", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    return kernels::cpu::make_grad_accumulate_rows(accumulate_rows_params(lg.graph(), lg.node(id)));
  });
  register_cpu_kernel("adafactor_update", [](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    if (!all_f32(g, n)) return nullptr;
    kernels::AdafactorParams p;
    fill_adafactor_params(g, n, p);
    return kernels::cpu::make_adafactor_update(p);
  });
}

}  // namespace memfit
