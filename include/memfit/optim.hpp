// Optimizers as one update node over all trainable parameters: the node reads
// every (parameter, gradient, state) triple, and its kernel loops over the
// flat, mirrored buffers.
//
// The update node's inputs are p_0..p_{n-1}, g_0..g_{n-1}, then S groups of n
// state values (group s, parameter i at index 2n + s n + i), and every
// per-tensor attribute is a vector of length n ("decay"; "blockwise" for
// 8-bit state; "rows" for adafactor). The groups:
//   sgd (momentum != 0)  momentum
//   adam, adamw          exp_avg, exp_avg_sq
//   8bit state adds      absmax: f32 [moments, blocks] of 2048-element
//                        blocks (row s scales group s); a tensor below
//                        quantise_min keeps fp32 moments and a [1]
//                        placeholder here (never read: 64 bytes in the plan)
//   adafactor            exp_avg_sq_row [rows], exp_avg_sq_col [n / rows]
//                        (a 1-d parameter: exp_avg_sq of its shape, and a
//                        [1] placeholder exp_avg_sq_col, never read)
// Optimizer state formats (OptimizerConfig::state, --optimizer-state):
//   fp32  the moments in f32 (8 B/param for Adam)
//   bf16  the moments in bf16 with stochastic rounding (4 B/param)
//   8bit  blockwise-quantised moments: u8 codes and one f32 absmax per 2048
//         elements (2.004 B/param for Adam; kernels/optim_state.hpp has the
//         codes and their error bounds)
#pragma once

#include <string>
#include <vector>

#include "memfit/graph.hpp"

namespace memfit {

// Elements per block of 8-bit state (one absmax scale each); the kernels'
// kernels::qstate::kQuantBlock, which the lowering checks against the node.
constexpr int64_t kQuantBlock = 2048;

struct OptimizerConfig {
  std::string kind = "sgd";  // sgd | adam | adamw | adafactor
  double momentum = 0.9;     // sgd
  bool nesterov = false;     // sgd
  double weight_decay = 0.0; // sgd/adam: L2 added to the gradient; adamw, adafactor: decoupled
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool decay_bias_and_norm = true;  // false: no weight decay on parameters marked Value::no_weight_decay
  double clip_grad_norm = 0.0;      // > 0: clip gradients by global L2 norm
  // Storage of the moments (adam, adamw) and of SGD's momentum: fp32, bf16
  // or 8bit (above). Adafactor's factored state is fp32 only.
  std::string state = "fp32";
  // 8bit: tensors with fewer elements keep fp32 moments (biases, norms:
  // too small for the bytes to matter, and blocks of one scale each).
  int64_t quantise_min = 4096;
  // Adafactor (Shazeer & Stern 2018; the defaults of its reference
  // implementations): eps1 regularises the squared gradient, eps2 floors
  // the parameter scale, updates are clipped to an RMS of clip_threshold,
  // and the second-moment decay is 1 - t^decay_rate.
  double eps1 = 1e-30, eps2 = 1e-3, clip_threshold = 1.0, decay_rate = -0.8;
  // Adafactor: true: the step size is min(1e-2, 1/sqrt(t)) times the
  // parameter's RMS (at least eps2), the learning rate unused; false: the
  // step size is the learning rate (the schedule's).
  bool relative_step = true;
  // Sharded optimizer state (data parallelism, ZeRO stage 1): the update
  // covers shard `shard` of `shards` of the trainable parameters
  // (shard_bounds), and only their state exists. 1 shard: all of them.
  int shard = 0, shards = 1;
};

// The trainable parameters the optimizer updates (those with a gradient),
// in creation order: the order of the parameter and gradient arenas.
std::vector<ValueId> updated_params(const Graph& g);

// Shard s of `shards` is updated_params(g)[b[s], b[s+1]): contiguous runs
// of whole tensors whose element counts are as even as whole tensors allow
// (each cut at the tensor boundary nearest to an equal share), every shard
// non-empty. Throws GraphError when there are fewer tensors than shards.
std::vector<size_t> shard_bounds(const Graph& g, int shards);

// Appends optimizer state values (class OptState) and the update node.
// Requires build_backward to have run. Returns the update node id.
NodeId append_optimizer(Graph& g, const OptimizerConfig& cfg);

// Throws std::invalid_argument naming what is wrong with cfg (an unknown
// kind or state format, a state format the kind does not take).
void check_optimizer(const OptimizerConfig& cfg);

// f32 moments per trainable parameter element that `kind` keeps in full
// (sgd with momentum 1, adam/adamw 2, sgd without momentum and adafactor 0):
// the fp32 state a compact format is measured against.
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

// The update node u split into one node per parameter (count 1, the state
// groups and every per-tensor attribute sliced to it): u keeps parameter 0,
// the others are appended to the graph. Returns them in parameter order.
// Throws GraphError (starting with `why`) where u clips by the global norm.
std::vector<NodeId> split_update(Graph& g, NodeId u, const std::string& why);

// Gradient sharding (ZeRO stage 2) for rank `shard` of `shards`, with the
// optimizer state sharded the same way (shard_bounds): after the last
// backward node that writes or reads a parameter's gradient, a grad_reduce
// node sums it over the ranks into its owner's, during backward; the
// gradients this rank does not own become transients planned from their
// first write to that node, so each rank holds only its shard of the
// gradients past their reduce (and none of them in forward). The ranks
// reduce in the same order: the schedule is the same on every rank. Call
// after append_optimizer and every pass that adds backward nodes. Throws
// GraphError with gradient accumulation (the reduce cannot wait for the
// group's micro-batches). Returns the number of reduce nodes.
int shard_gradients(Graph& g, int shard, int shards);

// A trainable parameter's gradient: the value autodiff made for it (grad_of
// a parameter), whichever class the planner gives it.
inline bool is_param_grad(const Graph& g, ValueId v) {
  const ValueId of = g.value(v).grad_of;
  return of != kNone && g.value(of).cls == VClass::Param && g.value(of).grad == v;
}

// A short description of the state policy for the plan ("8bit", "bf16",
// "fp32", "adafactor factored").
std::string optimizer_state_policy(const OptimizerConfig& cfg);

}  // namespace memfit
