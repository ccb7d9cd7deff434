#include "ops/rnn/params_of.hpp"
#include "ops/rnn/ref.hpp"
#include "runtime/lower/lower_util.hpp"

namespace memfit {

void register_rnn_ref_kernels() {
  register_kernel("rnn", [](const LoweredGraph& lg, NodeId id) -> std::unique_ptr<kernels::Kernel> {
    return make_ref<kernels::ref::Rnn>(lg, rnn_params(lg.graph(), lg.node(id)));
  });
  register_kernel("rnn_bwd", [](const LoweredGraph& lg, NodeId id) -> std::unique_ptr<kernels::Kernel> {
    return make_ref<kernels::ref::RnnBwd>(lg, rnn_params(lg.graph(), lg.node(id)));
  });
}

}  // namespace memfit
