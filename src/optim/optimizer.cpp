#include <stdexcept>

#include "memfit/optim.hpp"

namespace memfit {

size_t optimizer_state_floats(const OptimizerConfig& c) {
  if (c.kind == "sgd") return c.momentum != 0.0 ? 1 : 0;
  if (c.kind == "adam" || c.kind == "adamw") return 2;
  throw std::invalid_argument("unknown optimizer '" + c.kind + "' (expected sgd, adam or adamw)");
}

NodeId append_optimizer(Graph& g, const OptimizerConfig& c) {
  const size_t states = optimizer_state_floats(c);
  std::vector<ValueId> params, grads;
  std::vector<int64_t> decay;  // per tensor, 0/1
  for (ValueId p : g.trainable_params()) {
    if (g.value(p).grad == kNone) continue;  // does not reach the loss
    params.push_back(p);
    grads.push_back(g.value(p).grad);
    decay.push_back(c.decay_bias_and_norm || !g.value(p).no_weight_decay ? 1 : 0);  // the model's groups
  }
  if (params.empty()) throw GraphError("nothing to train: no parameter has a gradient");
  std::vector<ValueId> ins = params;
  ins.insert(ins.end(), grads.begin(), grads.end());
  const char* suffix[2] = {c.kind == "sgd" ? ".momentum" : ".exp_avg", ".exp_avg_sq"};
  for (size_t s = 0; s < states; ++s) {
    for (ValueId p : params) {
      Value v;
      v.name = g.value(p).name + suffix[s];
      v.shape = g.value(p).shape;
      v.cls = VClass::OptState;
      ins.push_back(g.add_value(v));
    }
  }
  Attrs a{{"kind", c.kind},
          {"momentum", c.momentum},
          {"nesterov", int64_t(c.nesterov)},
          {"weight_decay", c.weight_decay},
          {"decay", decay},
          {"beta1", c.beta1},
          {"beta2", c.beta2},
          {"eps", c.eps},
          {"clip_norm", c.clip_grad_norm},
          {"count", static_cast<int64_t>(params.size())},
          {"states", static_cast<int64_t>(states)}};
  const std::string op = c.kind == "sgd" ? "sgd_update" : "adam_update";
  g.add_node(op, ins, a, "optimizer", Phase::Update);
  return static_cast<NodeId>(g.num_nodes() - 1);
}

}  // namespace memfit
