// Op registry: every op family registers its shape inference, gradient rule
// and memory traits here (a family's op.cpp under src/ops/<family>/). The
// graph, autodiff and planner look ops up by name; nothing switches on op kind.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "memfit/graph.hpp"

namespace memfit {

// Passed to an op's gradient rule. Gradient contract: every backward node
// *assigns* its outputs (never accumulates); when a value feeds several
// consumers, autodiff sums their contributions with "add" nodes.
struct GradContext {
  Graph& g;
  NodeId node;                          // the forward node being differentiated
  std::vector<ValueId> out_grads;       // gradient of each output, kNone if none flows
  std::vector<bool> need;               // which inputs need a gradient

  const Node& fwd() const { return g.node(node); }
  ValueId in(size_t i) const { return fwd().inputs.at(i); }
  ValueId out(size_t i) const { return fwd().outputs.at(i); }
  // Appends a backward node tagged with this forward node's layer.
  std::vector<ValueId> emit(const std::string& op, std::vector<ValueId> inputs, Attrs attrs = {}) {
    const std::string layer = fwd().layer;
    return g.add_node(op, std::move(inputs), std::move(attrs), layer, Phase::Backward, node);
  }
  ValueId emit1(const std::string& op, std::vector<ValueId> inputs, Attrs attrs = {}) {
    return emit(op, std::move(inputs), std::move(attrs)).at(0);
  }
};

// Everything the passes need to know about an op, so that none of them
// switches on its name: the planner (in place, views), mixed precision (rounded weights, ops that convert types
// themselves), recomputation (cost, state updates) and autodiff.
struct OpTraits {
  // Output 0 may take over the buffer of this input when the input's last
  // use is this node (element-wise ops; an optional input a node may lack,
  // then nothing is taken over). -1: never.
  int inplace_input = -1;
  // Output 0 is the same bytes as this input, reinterpreted (reshape). -1: no.
  int view_of_input = -1;
  // The op has no gradient, by intent (backward ops, optimizer updates,
  // metrics, constants). An op without a gradient rule must say so: autodiff
  // refuses a differentiable path through one that does not.
  bool no_gradient = false;
  // Parameter inputs the op multiplies with: under bf16/fp16 they are
  // rounded to that type, like the activations they meet.
  std::vector<size_t> low_precision_weights;
  // Its kernels take mixed storage types themselves (cast); never wrapped
  // in conversions.
  bool converts_types = false;
  // Heavy (a product: conv, linear, matmul): recomputation keeps its
  // outputs rather than run it again.
  bool heavy = false;
  // Cheap to run again (element-wise or a normalisation over a row): the
  // default recomputation ("auto") rebuilds its outputs in backward instead
  // of keeping them, where backward keeps its inputs anyway.
  bool rebuild = false;
  // An integer attribute that a recomputed copy of the node sets to 0, so
  // that running it twice changes no state (batch norm's running
  // statistics: "update_stats"). Empty: none.
  std::string recompute_disables;
  // The reference kernel is also the CPU kernel (data movement: concat,
  // slice, split); no fast CPU kernel is expected.
  bool reference_serves_cpu = false;
  // Output 0 holds elements of input 0, rearranged or selected (reshape,
  // slice, permute): the gradient of a parameter seen through it keeps the
  // parameter's gradient type (f32).
  bool rearranges_input = false;
  // An optional input the op adds its output into when present (a gradient
  // scatter's accumulator: embedding_bwd's third input): autodiff folds an
  // earlier contribution to the same gradient into it instead of adding the
  // two afterwards. -1: none.
  int accumulator_input = -1;
  // An optimizer update of parameters in place (its moments described by
  // the memory report).
  bool updates_parameters = false;
  // Accumulates a micro-batch's gradient into the step's (grad_accumulate).
  bool accumulates_gradients = false;
  // Reduces a gradient across data-parallel ranks itself (grad_reduce,
  // sharded optimizer state): the trainer then does not all-reduce.
  bool reduces_across_ranks = false;
  // Moves a tiered value between the offload tier and memory: Load reads
  // input 0 (tiered) into output 0; Store writes input 0 into input 1
  // (tiered); Wait waits for the queued copies of input 0's buffer. Only
  // Load and Store may read a tiered value (verify_plan checks).
  enum class TierIo : uint8_t { None, Load, Store, Wait };
  TierIo tier_io = TierIo::None;
  // Max pooling: output 0 holds each window's maximum of input 0, output 1
  // where it was (its backward routes each window's gradient there).
  bool window_max = false;
  // An element-wise op (one input) that commutes exactly with max pooling,
  // in values and in the gradient each window routes (relu: monotone, and
  // where a window's maximum is not positive both orders pass the window
  // 0): memfit/rewrite.hpp's pool_first pools before it.
  bool commutes_with_max_pool = false;
};

struct OpDef {
  std::string name;
  // Output shapes/dtypes from the inputs and attributes. Throws GraphError
  // naming the layer and the offending shapes.
  std::function<std::vector<ValueMeta>(const Graph&, const Node&)> infer;
  // Emits backward nodes; returns one gradient per input (kNone where not
  // needed or not differentiable). Empty only with traits.no_gradient.
  std::function<std::vector<ValueId>(GradContext&)> grad;
  OpTraits traits;
  // Multiply-adds x2 for one execution; used for reports and recompute choice.
  std::function<double(const Graph&, const Node&)> flops;
};

void register_op(OpDef def);
const OpDef& op_def(const std::string& name);  // throws GraphError if unknown
std::vector<std::string> registered_ops();

// Helpers for shape inference messages.
[[noreturn]] void shape_fail(const Graph& g, const Node& n, const std::string& what);
void expect_rank(const Graph& g, const Node& n, size_t input, size_t rank);

}  // namespace memfit
