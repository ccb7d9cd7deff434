// Reference lowering of the Transformer ops: layer_norm, gelu, softmax and
// their backward ops (kernels/ref/{layernorm,gelu,softmax}.hpp).
#include "kernels/ref/gelu.hpp"
#include "kernels/ref/layernorm.hpp"
#include "kernels/ref/softmax.hpp"
#include "runtime/lower/lower_util.hpp"
#include "runtime/lower/params_of_last_axis.hpp"

namespace memfit {
namespace {

// op lowers to reference kernel K made from params(g, n).
template <template <class> class K, class P>
void lower_to(const std::string& op, P (*params)(const Graph&, const Node&)) {
  register_kernel(op, [params](const LoweredGraph& lg, NodeId id) {
    return make_ref<K>(lg.backend(), params(lg.graph(), lg.node(id)));
  });
}

}  // namespace

void register_last_axis_kernels() {
  using namespace kernels::ref;
  lower_to<LayerNorm>("layer_norm", layer_norm_params);
  lower_to<LayerNormBwd>("layer_norm_bwd", layer_norm_params);
  lower_to<Gelu>("gelu", gelu_params);
  lower_to<GeluBwd>("gelu_bwd", gelu_params);
  lower_to<Softmax>("softmax", softmax_params);
  lower_to<SoftmaxBwd>("softmax_bwd", softmax_params);
}

}  // namespace memfit
