#include <stdexcept>

#include "ops/optim/params_of.hpp"
#include "ops/optim/ref.hpp"
#include "runtime/lower/lower_util.hpp"

namespace memfit {
namespace {

// bf16 and 8-bit state: f32 arithmetic on its own storage, so no double
// reference (whose device stores every float wide).
template <class P>
std::unique_ptr<kernels::Kernel> make_compact(const LoweredGraph& lg, const P& p) {
  if (wide(lg))
    throw std::runtime_error("bf16 and 8-bit optimizer state, bf16 master weights and bf16 gradients have no double-precision "
                             "reference kernel (use the cpu "
                             "or the f32 reference backend)");
  return std::make_unique<kernels::ref::CompactUpdate<P>>(p);
}

}  // namespace

void register_optim_ref_kernels() {
  register_kernel("sgd_update", [](const LoweredGraph& lg, NodeId id) -> std::unique_ptr<kernels::Kernel> {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    kernels::SgdParams p;
    fill_optimizer_params(g, n, p);
    p.momentum = n.attrs.f("momentum");
    p.nesterov = n.attrs.i("nesterov") != 0;
    p.state = state_layout(g, n, p.momentum != 0.0 ? 1 : 0);
    if (p.state.format != kernels::StateFormat::F32 || p.state.any_bf16_weights() || p.state.any_bf16_grads())
      return make_compact(lg, p);
    return make_ref<kernels::ref::SgdUpdate>(lg, p);
  });
  register_kernel("grad_accumulate", [](const LoweredGraph& lg, NodeId id) -> std::unique_ptr<kernels::Kernel> {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Value& acc = g.value(n.inputs[0]);
    const DType gt = g.value(n.inputs[1]).dtype;
    if (gt != DType::f32 || (acc.dtype != DType::f32 && acc.dtype != DType::bf16))
      throw std::runtime_error("grad_accumulate adds an f32 gradient into an f32 or bf16 one; '" + acc.name + "' is " +
                               dtype_name(acc.dtype) + " and its micro-batch gradient " + dtype_name(gt));
    if (acc.dtype == DType::bf16) {
      if (wide(lg))
        throw std::runtime_error("bf16 accumulated gradients have no double-precision reference kernel (use the cpu "
                                 "or the f32 reference backend)");
      return std::unique_ptr<kernels::Kernel>(
          std::make_unique<kernels::ref::GradAccumulateBf16>(numel(acc.shape), n.attrs.s("param")));
    }
    return make_ref<kernels::ref::GradAccumulate>(lg, kernels::EltwiseParams{numel(acc.shape)});
  });
  register_kernel("grad_accumulate_matmul", [](const LoweredGraph& lg, NodeId id) -> std::unique_ptr<kernels::Kernel> {
    if (wide(lg))
      throw std::runtime_error("bf16 accumulated gradients have no double-precision reference kernel (use the cpu "
                               "or the f32 reference backend)");
    return std::make_unique<kernels::ref::GradAccumulateMatmulBf16>(accumulate_matmul_params(lg.graph(), lg.node(id)));
  });
  register_kernel("grad_accumulate_rows", [](const LoweredGraph& lg, NodeId id) -> std::unique_ptr<kernels::Kernel> {
    if (wide(lg))
      throw std::runtime_error("bf16 accumulated gradients have no double-precision reference kernel (use the cpu "
                               "or the f32 reference backend)");
    return std::make_unique<kernels::ref::GradAccumulateRowsBf16>(accumulate_rows_params(lg.graph(), lg.node(id)));
  });
  register_kernel("grad_reduce", [](const LoweredGraph& lg, NodeId id) -> std::unique_ptr<kernels::Kernel> {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Value& v = g.value(n.inputs.at(0));
    if (v.dtype != DType::f32 || wide(lg))
      throw std::runtime_error("grad_reduce sums f32 gradients over the ranks; '" + v.name + "' is " +
                               dtype_name(v.dtype) + (wide(lg) ? " on the double reference" : ""));
    return std::make_unique<kernels::ref::GradReduce>(numel(v.shape), static_cast<int>(n.attrs.i("root")));
  });
  register_kernel("adam_update", [](const LoweredGraph& lg, NodeId id) -> std::unique_ptr<kernels::Kernel> {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    kernels::AdamParams p;
    fill_adam_params(g, n, p);
    if (p.state.format != kernels::StateFormat::F32 || p.state.any_bf16_weights() || p.state.any_bf16_grads())
      return make_compact(lg, p);
    return make_ref<kernels::ref::AdamUpdate>(lg, p);
  });
  register_kernel("adafactor_update", [](const LoweredGraph& lg, NodeId id) {
    kernels::AdafactorParams p;
    fill_adafactor_params(lg.graph(), lg.node(id), p);
    for (size_t t = 0; t < 2 * p.sizes.size(); ++t)
      if (lg.graph().value(lg.node(id).inputs[t]).dtype != DType::f32)
        throw std::runtime_error("adafactor updates f32 parameters with f32 gradients only; '" +
                                 lg.graph().value(lg.node(id).inputs[t]).name + "' is " +
                                 dtype_name(lg.graph().value(lg.node(id).inputs[t]).dtype) +
                                 " (bf16 master weights and bf16 accumulated gradients take sgd, adam or adamw)");
    return make_ref<kernels::ref::AdafactorUpdate>(lg, p);
  });
}

}  // namespace memfit
