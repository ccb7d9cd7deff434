// Optimizer update nodes: in place over parameters and optimizer state, no outputs.
#include "graph/ops/common.hpp"

namespace memfit {

void register_optim_ops() {
  for (const char* name : {"sgd_update", "adam_update"}) {
    OpDef d;
    d.name = name;
    d.traits.mutates_inputs = true;
    d.infer = [](const Graph&, const Node&) { return std::vector<ValueMeta>{}; };
    register_op(d);
  }
}

}  // namespace memfit
