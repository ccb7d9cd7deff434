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

}  // namespace memfit
