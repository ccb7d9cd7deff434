// How one training step runs: every choice the fit searches and the options
// can fix, as one value. The step graph is built from one (StepSpec is a
// StepPolicy and what it runs on), the fit enumerates them (FitCandidate),
// a re-plan is the same options with another (with_policy), the plan report
// shows one, and the ranks of a job agree on one (key()).
//
// Adding a dimension: a field here (with describe() and key()), the pass
// that applies it (build_step_graph's), the fit's enumeration (search_fit),
// and, when the user may fix it, its flag and the two mappings in
// train/options.cpp.
#pragma once

#include <cstdint>
#include <string>

#include "memfit/graph.hpp"

namespace memfit::train {

// The --precision spelling of an activation type.
inline const char* precision_name(DType t) { return t == DType::bf16 ? "bf16" : t == DType::f16 ? "fp16" : "fp32"; }

struct StepPolicy {
  int64_t batch = 64;        // samples per micro-batch
  int64_t accumulation = 1;  // micro-batches per optimizer step (gradients accumulate)
  std::string recompute = "auto";  // none | auto | cheap | segments (memfit/recompute.hpp)
  // One update per parameter inside backward, as soon as its gradient is
  // complete (memfit/optim.hpp update_in_backward): gradients become
  // transients. Not with accumulation or global-norm clipping.
  bool update_in_backward = false;
  // With the optimizer state sharded over ranks: the gradients too (ZeRO
  // stage 2; memfit/optim.hpp shard_gradients). One micro-batch.
  bool shard_gradients = false;
  // Mixed precision: the type activations (and their gradients) are stored
  // in between the model's input and its logits. Parameters, their
  // gradients, optimizer state, batch-norm statistics and the loss stay f32.
  DType precision = DType::f32;
  // bf16: keep f32 values saved for backward as bf16 in between (lossy
  // compression, memfit/recompute.hpp compress_saved); f32: as computed.
  DType saved = DType::f32;
  // The optimizer's state storage (OptimizerConfig::state: fp32, bf16,
  // 8bit) when the policy sets it (policy_of and the fit always do); ""
  // leaves StepSpec::optimizer's own. effective_state() says which.
  std::string optimizer_state;
  // bf16 master weights (Graph::weight_storage): every weight of rank >= 2
  // is stored in bf16 and updated from its f32 gradient with stochastic
  // rounding; vectors (biases, norms) stay f32. An approximation.
  DType master_weights = DType::f32;
  // With accumulation (accumulation > 1): the type the accumulated
  // gradients are kept in between micro-batches (memfit/accumulate.hpp):
  // f32, or bf16 with stochastic rounding (half the memory; an
  // approximation). No effect on one micro-batch.
  DType accumulated_grads = DType::f32;
  // Where the dataset is held, when that was chosen with the plan: "memory"
  // or "disk" (streamed); "" as it was opened. Not part of the step graph.
  std::string data_in;
  // Values kept in the offload tier (a file on disk, memfit/tier.hpp)
  // instead of memory, read in where the step uses them: a comma-separated
  // set of "params" (trainable parameters), "frozen" (the others) and
  // "state" (optimizer state); "" none.
  std::string offload;
  // With an offload: how far ahead the tier's I/O thread moves the copies
  // (TierOptions::ahead): 0 reads and writes each where the step uses it,
  // the step waiting; n >= 1 queues them n places of use ahead, so the I/O
  // overlaps the compute, for a larger window of copies in memory.
  int offload_ahead = 1;

  bool operator==(const StepPolicy&) const = default;

  // For people: "micro-batch 16 x 4, bf16, recompute cheap, update in
  // backward, 8bit optimizer state, dataset streamed from disk" (fp32 state
  // and weights, and an unchosen residency, are left out).
  std::string describe() const;
  // Every field that shapes the step, spelled out: the ranks of a job
  // compare a hash of it (data_in, each rank's own choice, is left out).
  std::string key() const;
};

}  // namespace memfit::train
