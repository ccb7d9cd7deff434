// Activation recomputation: forward values that backward reads but the
// policy does not keep are recomputed inside backward, right before their
// first reader, by clones of the forward nodes that made them (recursively,
// from the nearest kept values). Clones of batch norm do not update running
// statistics again; dropout clones draw the same mask (it is a function of
// seed, layer, step and micro-batch).
#pragma once

#include <functional>
#include <string>

#include "memfit/graph.hpp"

namespace memfit {

struct RecomputeStats {
  int cloned_nodes = 0;
  double extra_flops = 0;   // forward FLOPs run a second time per step
  size_t saved_bytes_before = 0, saved_bytes_after = 0;  // forward values read by backward, as stored
};

// keep(g, v): true if forward value v may stay alive until backward reads it.
RecomputeStats apply_recompute(Graph& g, const std::function<bool(const Graph&, ValueId)>& keep);

// Policies:
//  "none"     keep everything
//  "auto"     (the default) rebuild the outputs of cheap ops (traits.rebuild:
//             GELU, layer norm) whose forward inputs backward keeps anyway,
//             right before their backward reader: less memory, nothing
//             extra kept, one element-wise pass more
//  "cheap"    keep outputs of conv/linear/matmul (and graph inputs); recompute
//             element-wise ops, batch norm, pooling from them: a few % more time
//  "segments" keep the heavy outputs that end ~sqrt(n) segments of equal
//             bytes and recompute each segment in its backward: ~one extra forward
bool valid_recompute_policy(const std::string& p);
RecomputeStats apply_recompute_policy(Graph& g, const std::string& policy);

// Saved-activation compression ("--saved-activations bf16"): each f32
// forward value of at least min_bytes that backward reads is kept as `to`
// (bf16) from forward to backward: a cast right after its producer, and a
// cast back to f32 right before each backward reader, so the f32 original
// dies with its last forward reader. Lossy (8 significant bits), unlike
// recomputation; relu masks (y > 0) and max-pool indices come through
// exactly (but for f32 denormals, which bf16 flushes to zero). extra_flops stays 0 (the casts are memory-bound); cloned_nodes
// counts the casts added.
RecomputeStats compress_saved(Graph& g, DType to, size_t min_bytes = 64 * 1024);

}  // namespace memfit
