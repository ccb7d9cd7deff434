// Fast CPU lowering of the Transformer ops: layer_norm, gelu, softmax and
// their backward ops (kernels/cpu/{layernorm,gelu,softmax}.hpp), for f32 or
// bf16 activations; f16, or bf16 in a build without the bf16 loops, falls
// back to the reference kernel between conversions (runtime/mixed.hpp).
// Their operands are always plain (no traits.blocked).
#include "kernels/cpu/gelu.hpp"
#include "kernels/cpu/layernorm.hpp"
#include "kernels/cpu/softmax.hpp"
#include "runtime/lower/params_of_last_axis.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"

namespace memfit {
namespace {

using KPtr = std::unique_ptr<kernels::Kernel>;

// op lowers to make(params(g, n), activation type).
template <class P>
void lower_to(const std::string& op, P (*params)(const Graph&, const Node&), KPtr (*make)(const P&, kernels::ElemType)) {
  register_cpu_kernel(op, [params, make](const LoweredGraph& lg, NodeId id) -> KPtr {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const auto act = cpu_act(g, n);
    return act ? make(params(g, n), *act) : nullptr;
  });
}

}  // namespace

void register_cpu_last_axis_kernels() {
  using namespace kernels::cpu;
  lower_to("layer_norm", layer_norm_params, make_layer_norm);
  lower_to("layer_norm_bwd", layer_norm_params, make_layer_norm_bwd);
  lower_to("gelu", gelu_params, make_gelu);
  lower_to("gelu_bwd", gelu_params, make_gelu_bwd);
  lower_to("softmax", softmax_params, make_softmax);
  lower_to("softmax_bwd", softmax_params, make_softmax_bwd);
}

}  // namespace memfit
