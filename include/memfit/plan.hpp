// The memory plan: every buffer's arena, offset and lifetime, decided before
// any memory is touched. make_plan is a pure function of the graph, the byte
// size of every value and the scratch bytes of every node; verify_plan checks
// a plan independently of how it was made.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "memfit/graph.hpp"

namespace memfit {

// Where bytes live. Transient is the liveness-planned arena (activations,
// activation gradients, saved values, kernel scratch); the rest are flat,
// persistent arrays mirrored by parameter order. Tier is not memory: the
// tiered values' home in the offload file (their bytes counted there, never
// allocated; the step reads them into transient buffers).
enum class Arena : uint8_t { Transient, Params, Grads, OptState, Inputs, Tier, Count };
constexpr size_t kNumArenas = static_cast<size_t>(Arena::Count);
const char* arena_name(Arena a);
// Whether an arena is memory the executor allocates (all but Tier).
inline bool in_memory(Arena a) { return a != Arena::Tier; }

struct PlanOptions {
  bool no_plan = false;     // debug: every value its own buffer, no reuse, no in-place
  size_t guard_bytes = 0;   // debug: bytes of guard pattern after every transient buffer
  size_t alignment = 64;
  bool in_place = true;     // allow in-place reuse where op traits say so
};

struct Placement {
  Arena arena = Arena::Transient;
  size_t offset = 0;
  size_t bytes = 0;          // bytes of this value (views: their own size)
  ValueId root = kNone;      // value whose buffer this one shares (itself if it owns one)
  int32_t first = -1;        // node index of definition (-1: before the step)
  int32_t last = -1;         // node index of last use (num_nodes: kept after the step)
};

struct ScratchPlacement {
  size_t offset = 0;
  size_t bytes = 0;
};

struct Plan {
  std::vector<Placement> values;           // per value id
  std::vector<ScratchPlacement> scratch;   // per node, in the transient arena
  std::array<size_t, kNumArenas> arena_bytes{};
  size_t naive_transient_bytes = 0;        // sum of all transient buffers and scratch, no reuse
  size_t peak_live_bytes = 0;              // max over time of live transient bytes (a lower bound)
  // The largest heap a kernel's library takes and frees inside one run
  // (Kernel::heap_bytes; set by the executor): not in an arena, but in the
  // process's peak, so counted in total_bytes().
  size_t library_heap_bytes = 0;
  PlanOptions options;
  // Bytes of memory: every arena but the tier, and the library heap.
  size_t total_bytes() const;
  // Bytes the step reads from and writes to the tier (tier_load and
  // tier_store nodes, as the values are stored).
  size_t tier_read_bytes = 0, tier_written_bytes = 0;
};

// value_bytes: storage bytes per value (as the backend stores it);
// node_scratch: scratch bytes per node.
Plan make_plan(const Graph& g, const std::vector<size_t>& value_bytes, const std::vector<size_t>& node_scratch,
               const PlanOptions& opt = {});

// Independent checks, from the graph and op traits alone (nothing the
// planner derived is trusted): replaying the schedule, at every node each
// live transient value (with its guard) and each scratch owns its bytes
// exclusively, except a view on its input's bytes and an in-place output
// taking over an input at that input's last use, as the op traits declare;
// pinned buffers (parameters, gradients, optimizer state, inputs) never
// share a byte; offsets aligned; everything within its arena. With
// value_bytes / node_scratch, also that every buffer has the bytes it needs.
// Returns an empty string when the plan is sound, else the first violation.
std::string verify_plan(const Graph& g, const Plan& p);
std::string verify_plan(const Graph& g, const Plan& p, const std::vector<size_t>& value_bytes,
                        const std::vector<size_t>& node_scratch);

}  // namespace memfit
