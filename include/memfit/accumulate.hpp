// Gradient accumulation: an optimizer step over k micro-batches. The graph's
// parameter gradients become transient per micro-batch gradients, and a
// grad_accumulate node per parameter folds each into a persistent gradient
// (assigning on micro-batch 0, adding after). The trainer runs the schedule
// up to the update k times, then the update once with grad_scale = 1/k, so
// the step equals one over the whole effective batch.
#pragma once

#include "memfit/graph.hpp"

namespace memfit {

// Call after build_backward and before append_optimizer. Afterwards each
// trainable parameter's `grad` is the persistent accumulated gradient.
void add_gradient_accumulation(Graph& g);

}  // namespace memfit
