#include "ops/lstm/params_of.hpp"
#include "ops/lstm/ref.hpp"
#include "runtime/lower/lower_util.hpp"

namespace memfit {

void register_lstm_ref_kernels() {
  for (const char* op : {"lstm", "lstm_bwd"}) {
    const bool fwd = std::string(op) == "lstm";
    register_kernel(op, [fwd](const LoweredGraph& lg, NodeId id) -> std::unique_ptr<kernels::Kernel> {
      const kernels::LstmParams p = lstm_params(lg.graph(), lg.node(id));
      if (fwd) return make_ref<kernels::ref::Lstm>(lg, p);
      return make_ref<kernels::ref::LstmBwd>(lg, p);
    });
  }
}

}  // namespace memfit
