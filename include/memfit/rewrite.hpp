// Rewrites of a forward graph that change what runs, not what it computes:
// the step compiler applies them after the model is built and before
// autodiff (compile/step_graph.cpp).
#pragma once

#include "memfit/graph.hpp"

namespace memfit {

// Max pooling before the element-wise op in front of it, where the op
// commutes with it (OpTraits::commutes_with_max_pool: relu) and the pooling
// is the only reader of the op's output: conv -> relu -> max pool becomes
// conv -> max pool -> relu. The values and gradients are the same bits;
// the op then runs over the pooled elements (a quarter of them at 2x2
// windows), forward and backward, and the unpooled activations it would
// keep for its backward are not kept. The op's node and value keep their
// names. Returns the number of pairs swapped.
int pool_first(Graph& g);

}  // namespace memfit
