// One training (or evaluation) step as a graph: data inputs, the model, the
// loss, and in training mode the backward and the optimizer update.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "memfit/autodiff.hpp"
#include "memfit/graph.hpp"
#include "memfit/optim.hpp"
#include "memfit/recompute.hpp"
#include "memfit/tensor_spec.hpp"
#include "memfit/tier.hpp"
#include "models/model.hpp"
#include "compile/step_policy.hpp"

namespace memfit::train {

// A step to build: the policy it runs with (micro-batch, accumulation,
// precision, recomputation, ...; compile/step_policy.hpp) and what it runs on.
struct StepSpec : StepPolicy {
  std::string model = "convnet";
  // The model itself, when not found by name (programs and tests that
  // build their own); `model` then only names it.
  std::shared_ptr<const models::Model> model_def;
  // The tensors one sample of the data holds (data::Dataset::tensors()).
  // Empty: an image [channels, height, width] and a label of `classes`.
  std::vector<TensorSpec> data;
  int64_t channels = 1, height = 28, width = 28;
  int64_t classes = 10;
  bool training = true;
  double label_smoothing = 0.0;
  // The optimizer; its state storage is the policy's optimizer_state where
  // that is set.
  OptimizerConfig optimizer;
  bool with_update = true;  // append the optimizer update (training only)
  // Transfer learning: parameters whose names match one of these patterns
  // (glob, or a module prefix: "layer1" matches "layer1.0.conv1.weight") are
  // frozen; bias_only freezes every parameter that is not a bias.
  std::vector<std::string> freeze;
  bool bias_only = false;
  models::ResolveOptions model_options;  // how `model` is read (dropout restored into an ONNX file)
  bool with_loss = true;    // false: no loss (evaluation)
  // Evaluation: xent_metrics over the logits and the target as outputs
  // (StepGraph::metrics), the logits then not kept as an output.
  bool with_metrics = false;
  // Data parallelism: the ranks the gradients are averaged over (the update
  // waits for that, so never inside backward); the optimizer's shards
  // (OptimizerConfig::shard) say which parameters this rank updates.
  int ranks = 1;

  StepPolicy& policy() { return *this; }
  const StepPolicy& policy() const { return *this; }
  // The state storage the optimizer gets: the policy's, else the optimizer's own.
  const std::string& effective_state() const { return optimizer_state.empty() ? optimizer.state : optimizer_state; }
};

// One named input of a step: a model input or the target.
struct StepInput {
  TensorSpec spec;  // per sample, as the data yields it
  ValueId value = kNone;  // [N, spec.shape...]
  bool target = false;
};

struct StepGraph {
  Graph g;
  models::Task task = models::Task::Classification;
  // In the data's tensor order (the target last).
  std::vector<StepInput> inputs;
  // x: the model's first input; labels: the target.
  ValueId x = kNone, labels = kNone, logits = kNone, loss = kNone;
  XentMetrics metrics{kNone, kNone, kNone};  // with_metrics
  BackwardResult backward;
  RecomputeStats recompute;
  RecomputeStats compress;  // saved-activation compression
  int updates_in_backward = 0;  // update_in_backward: the per-parameter update nodes
  TierResult tier;              // StepPolicy::offload: what the tier pass moved
};

// StepPolicy::offload's set as the tier pass's options; throws
// std::invalid_argument naming an unknown part.
TierOptions offload_options(const std::string& offload);

// True if a parameter name matches a --freeze pattern.
bool name_matches(const std::string& pattern, const std::string& name);

// The first node of the optimizer update (Phase::Update), which runs after
// every other node; num_nodes() if the graph has none. Throws
// std::logic_error if update nodes are not all at the end (as under
// update_in_backward).
size_t update_begin(const Graph& g);

// The image form of StepSpec::data: image f32 [C,H,W] and labels i32 [] of
// `classes` values.
std::vector<TensorSpec> image_tensors(int64_t channels, int64_t height, int64_t width, int64_t classes);

// Throws GraphError for a bad model, an unknown model name, or data that
// does not hold the model's inputs and target (naming both).
std::unique_ptr<StepGraph> build_step_graph(const StepSpec& spec);

}  // namespace memfit::train
