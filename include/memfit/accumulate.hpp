// Gradient accumulation: an optimizer step over k micro-batches. The graph's
// parameter gradients become transient per micro-batch gradients, and a
// grad_accumulate node per parameter folds each into a persistent gradient
// (assigning on micro-batch 0, adding after). The trainer runs the schedule
// up to the update k times, then the update once with grad_scale = 1/k, so
// the step equals one over the whole effective batch.
//
// The accumulated gradients may be kept in bf16 (half the memory of f32,
// an approximation): each micro-batch's f32 gradient is added in f32 to the
// widened sum and rounded back stochastically, so the stored sum is the f32
// one in expectation (kernels/optim_state.hpp grad_rounding_key). The
// optimizer kernels read bf16 gradients directly. Where a bf16 gradient's
// micro-batch value is made by a matmul (a tied output projection's weight
// gradient) or an embedding's scatter (embedding_bwd), the accumulation is
// fused into that op (grad_accumulate_matmul, grad_accumulate_rows), so
// the f32 micro-batch gradient of a [vocab, D] table is never held whole;
// a tied table's two contributions are each added and rounded in turn.
#pragma once

#include "memfit/graph.hpp"

namespace memfit {

// Call after build_backward and before append_optimizer. Afterwards each
// trainable parameter's `grad` is the persistent accumulated gradient, of
// type `acc` (f32, or bf16).
void add_gradient_accumulation(Graph& g, DType acc = DType::f32);

}  // namespace memfit
