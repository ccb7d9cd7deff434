// Optimizers as one update node over all trainable parameters: the node reads
// every (parameter, gradient, state) triple, and its kernel loops over the
// flat, mirrored buffers.
#pragma once

#include <string>

#include "memfit/graph.hpp"

namespace memfit {

struct OptimizerConfig {
  std::string kind = "sgd";  // sgd | adam | adamw
  double momentum = 0.9;     // sgd
  bool nesterov = false;     // sgd
  double weight_decay = 0.0; // sgd/adam: L2 added to the gradient; adamw: decoupled
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool decay_bias_and_norm = true;  // false: no weight decay on parameters marked Value::no_weight_decay
  double clip_grad_norm = 0.0;      // > 0: clip gradients by global L2 norm
};

// Appends optimizer state values (class OptState) and the update node.
// Requires build_backward to have run. Returns the update node id.
NodeId append_optimizer(Graph& g, const OptimizerConfig& cfg);

// Bytes of optimizer state per trainable parameter element.
size_t optimizer_state_floats(const OptimizerConfig& cfg);

// Update in backward: the one update node becomes one per parameter (count
// 1, the state groups and every per-tensor attribute sliced to it), each
// scheduled as soon as the parameter's gradient is complete and no other
// node reads the parameter any more: after the last writer of the
// gradient (the sum of a tied or shared weight's contributions, which moves
// up to where its last contribution is made) and after the last reader of
// the parameter or a view of it (a backward that reads the weight, a
// recomputed forward). The gradients become transients, planned from their
// first write to their update instead of living the whole step. Exactly the
// same arithmetic as one update over all parameters: each element's update
// reads only its own parameter, gradient and state.
//
// Call after append_optimizer and after any pass that adds backward nodes
// (recomputation, saved-activation compression). Throws GraphError when the
// update cannot run inside backward: gradient accumulation (the update
// waits for the group's micro-batches) or clipping by the global norm (it
// needs every gradient first). Returns the number of update nodes.
int update_in_backward(Graph& g);

// A trainable parameter's gradient: the value autodiff made for it (grad_of
// a parameter), whichever class the planner gives it.
inline bool is_param_grad(const Graph& g, ValueId v) {
  const ValueId of = g.value(v).grad_of;
  return of != kNone && g.value(of).cls == VClass::Param && g.value(of).grad == v;
}

}  // namespace memfit
