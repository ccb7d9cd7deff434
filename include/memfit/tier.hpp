// Memory tiers: values that live in the offload tier (a file on disk, the
// store in runtime/tier_store.hpp) instead of memory, read into planned
// buffers where the step uses them and written back where it changes them.
//
// tier_values rewrites a finished step graph (after the optimizer, update in
// backward, recomputation and every other pass that adds nodes): each
// chosen persistent value P becomes tiered (Value::tiered: its bytes are in
// the tier, none in memory), and the nodes that read it read a transient
// copy instead, made by a tier_load node just before the first of them.
// Readers within `gap` nodes of each other share one copy; a copy that an
// optimizer update writes (in place) goes back with a tier_store node right
// after its last reader. The planner then places the copies by their
// lifetimes like any transient: the memory a tiered step needs is the
// window of copies alive at once, and the step computes exactly what it
// computes untiered (the same kernels on the same bytes).
//
// With TierOptions::ahead, the copies are queued on the tier's I/O thread
// instead (attribute async) and a tier_wait node on each copy's buffer
// marks where the step needs the copy done: a read before its first reader,
// a write before its buffer may be reused; the copies' planned lifetimes
// run from the queuing to the wait, so the planner counts the larger window.
//
// An update node over several parameters that reads a tiered value is first
// split into one per parameter (split_update, memfit/optim.hpp), so that a
// parameter's copy and its state's are live only around its own update.
#pragma once

#include <cstddef>
#include <cstdint>

#include "memfit/graph.hpp"

namespace memfit {

// The memory a tier store holds besides the plan's arenas: the aligned
// buffer its reads and writes pass through (runtime/tier_store.hpp).
constexpr size_t kTierIoBufferBytes = size_t(1) << 20;

struct TierOptions {
  bool params = false;  // trainable parameters
  bool frozen = false;  // parameters that are not trained
  bool state = false;   // optimizer state
  // Readers of a tiered value at most this many nodes apart share one copy
  // (fewer reads, a longer-lived copy).
  int64_t gap = 32;
  // 0: each copy is read right before its first reader and written right
  // after its last, the step waiting for the disk. n >= 1: the copies are
  // moved on the tier's I/O thread while the step computes, each read
  // queued n places of use ahead of its own and each write waited for n
  // places later (tier_wait nodes): the window of copies alive at once
  // grows with n, and the I/O overlaps the compute.
  int ahead = 0;
  bool any() const { return params || frozen || state; }
};

struct TierResult {
  int values = 0;  // values tiered
  int loads = 0, stores = 0;
  size_t bytes = 0;  // bytes of the values tiered (as the graph types them)
};

// Throws GraphError where a value cannot be tiered: a graph output, or an
// update that clips by the global norm and would have to be split.
TierResult tier_values(Graph& g, const TierOptions& o);

}  // namespace memfit
