// Op registry: every op family registers its shape inference, gradient rule
// and memory traits here (one file per family under src/graph/ops/). The
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

struct OpTraits {
  // Output 0 may take over the buffer of this input when the input's last
  // use is this node (element-wise ops). -1: never.
  int inplace_input = -1;
  // Output 0 is the same bytes as this input, reinterpreted (reshape). -1: no.
  int view_of_input = -1;
  // The node writes into some of its (persistent) inputs: batch-norm running
  // statistics, optimizer updates.
  bool mutates_inputs = false;
};

struct OpDef {
  std::string name;
  // Output shapes/dtypes from the inputs and attributes. Throws GraphError
  // naming the layer and the offending shapes.
  std::function<std::vector<ValueMeta>(const Graph&, const Node&)> infer;
  // Emits backward nodes; returns one gradient per input (kNone where not
  // needed or not differentiable). Empty function: op is not differentiable.
  std::function<std::vector<ValueId>(GradContext&)> grad;
  OpTraits traits;
  // Multiply-adds x2 for one execution; used for reports and recompute choice.
  std::function<double(const Graph&, const Node&)> flops;
};

void register_op(OpDef def);
const OpDef& op_def(const std::string& name);  // throws GraphError if unknown
bool has_op(const std::string& name);
std::vector<std::string> registered_ops();

// Helpers for shape inference messages.
[[noreturn]] void shape_fail(const Graph& g, const Node& n, const std::string& what);
void expect_rank(const Graph& g, const Node& n, size_t input, size_t rank);

}  // namespace memfit
