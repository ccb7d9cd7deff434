// Reverse-mode autodiff: appends backward nodes to the same graph, so one
// schedule holds forward, loss, backward (and later the optimizer update).
// Only values that depend on a trainable parameter (or on a value listed in
// `wrt`) get gradients; frozen parameters and data inputs get none.
#pragma once

#include <map>
#include <vector>

#include "memfit/graph.hpp"

namespace memfit {

struct BackwardResult {
  ValueId seed = kNone;                // the constant 1 gradient of the loss
  std::map<ValueId, ValueId> grads;    // value -> its gradient (params and `wrt`)
};

// `loss` must be a scalar ([1]) value. Gradients of trainable parameters get
// class ParamGrad; gradients of `wrt` values are marked as outputs.
BackwardResult build_backward(Graph& g, ValueId loss, const std::vector<ValueId>& wrt = {});

}  // namespace memfit
