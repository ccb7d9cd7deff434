#include "compile/step_graph.hpp"

#include <fnmatch.h>

#include <stdexcept>

#include "memfit/accumulate.hpp"
#include "memfit/builder.hpp"
#include "memfit/rewrite.hpp"
#include "models/model_file.hpp"
#include "compile/resolve.hpp"

namespace memfit::train {

bool name_matches(const std::string& pattern, const std::string& name) {
  if (::fnmatch(pattern.c_str(), name.c_str(), 0) == 0) return true;
  return name.size() > pattern.size() && name.compare(0, pattern.size(), pattern) == 0 && name[pattern.size()] == '.';
}

size_t update_begin(const Graph& g) {
  size_t first = g.num_nodes();
  for (size_t k = g.num_nodes(); k-- > 0 && g.node(static_cast<NodeId>(k)).phase == Phase::Update;) first = k;
  for (size_t k = 0; k < first; ++k)
    if (g.node(static_cast<NodeId>(k)).phase == Phase::Update)
      throw std::logic_error("optimizer update node " + std::to_string(k) + " runs before the end of the step");
  return first;
}

std::vector<TensorSpec> image_tensors(int64_t channels, int64_t height, int64_t width, int64_t classes) {
  return {{"image", DType::f32, {channels, height, width}, 0.0, 0}, {"labels", DType::i32, {}, -1.0, classes}};
}

namespace {

std::string describe(const models::InputDecl& d) { return d.name + " " + dtype_name(d.dtype) + " " + d.axes; }

// The data's tensor for a declared model input or target.
const TensorSpec& match(const models::Model& m, const models::InputDecl& want, const std::vector<TensorSpec>& data) {
  for (const TensorSpec& t : data)
    if (t.name == want.name) {
      if (t.dtype != want.dtype || t.shape.size() != want.rank)
        throw GraphError("model '" + m.name + "' reads " + describe(want) + ", but the data's '" + t.name + "' is " +
                         memfit::describe(t));
      return t;
    }
  throw GraphError("model '" + m.name + "' reads " + describe(want) + ", which the data does not hold (it holds " +
                   memfit::describe(data) + ")");
}

}  // namespace

namespace {

// The step before the tier pass.
std::unique_ptr<StepGraph> build_untiered(const StepSpec& s) {
  auto sg = std::make_unique<StepGraph>();
  Graph& g = sg->g;
  g.model_name = s.model;
  const models::Model model = s.model_def ? *s.model_def : models::resolve(s.model, s.model_options);
  sg->task = model.task;
  const std::vector<TensorSpec> data = s.data.empty() ? image_tensors(s.channels, s.height, s.width, s.classes) : s.data;
  g.weight_storage = s.master_weights;
  Builder b(g, s.training);
  // The graph's inputs in the data's order, each [N, per-sample shape].
  for (const TensorSpec& t : data) {
    bool used = t.name == model.target.name;
    for (const models::InputDecl& d : model.inputs) used = used || d.name == t.name;
    if (!used) continue;
    Shape shape{s.batch};
    shape.insert(shape.end(), t.shape.begin(), t.shape.end());
    sg->inputs.push_back({t, g.input(t.name, shape, t.dtype), t.name == model.target.name});
  }
  auto value_of = [&](const std::string& name) {
    for (const StepInput& in : sg->inputs)
      if (in.spec.name == name) return in.value;
    return kNone;
  };
  b.activations = s.precision;
  models::Inputs ins;
  for (const models::InputDecl& d : model.inputs) {
    if (d.optional && value_of(d.name) == kNone) continue;  // the data does not hold it
    ins.specs[d.name] = match(model, d, data);
    ValueId v = value_of(d.name);
    // Float inputs are cast once on entry to the activation type.
    if (s.precision != DType::f32 && d.dtype == DType::f32) v = cast(b, v, s.precision);
    ins.values[d.name] = v;
  }
  match(model, model.target, data);
  sg->x = value_of(model.inputs.at(0).name);
  sg->labels = value_of(model.target.name);
  sg->logits = model.build(b, ins, s.classes);
  {
    // The forward graph's rewrites (memfit/rewrite.hpp), every reader of an
    // intermediate value made; the logits stay the values the model made.
    const bool kept = g.value(sg->logits).is_output;
    g.value(sg->logits).is_output = true;
    pool_first(g);
    g.value(sg->logits).is_output = kept;
  }
  if (s.precision != DType::f32) {
    // The logits go back to f32 for the loss (softmax and its log-sum-exp
    // need f32 range and precision).
    sg->logits = cast(b, sg->logits, DType::f32);
    g.node(g.value(sg->logits).producer).attrs.set("grad_loss_scale", int64_t(1));
  }
  const bool lm_loss = model.task == models::Task::LanguageModel && s.with_loss;
  if (s.with_metrics) {
    sg->metrics = xent_metrics(b, sg->logits, sg->labels);
    for (ValueId v : {sg->metrics.loss_sum, sg->metrics.correct, sg->metrics.count}) g.value(v).is_output = true;
  } else if (!(lm_loss && s.training)) {
    // A language model's training step gives the logits' buffer to their
    // gradient (xent_rows_bwd in place): they are not kept.
    g.value(sg->logits).is_output = true;
  }
  if (!s.with_loss) return sg;
  if (lm_loss) {
    // Per token, padding (negative targets) not counted, and only the rows'
    // log-sum-exp saved: no [N T, V] probabilities beside the logits.
    sg->loss = xent_rows(b, sg->logits, sg->labels, s.label_smoothing);
  } else {
    // A classifier's logits stay [N, classes]: softmax_xent reports any
    // other rank, naming the layer that made it.
    sg->loss = softmax_xent(b, sg->logits, sg->labels, s.label_smoothing);
  }
  g.value(sg->loss).is_output = true;
  g.value(sg->loss).is_loss = true;
  // --freeze PATTERN freezes what matches; --freeze '!PATTERN' everything
  // that matches no such kept pattern (a backbone: all but the head).
  bool keep_listed = false;
  for (const auto& pat : s.freeze) {
    const bool keep = !pat.empty() && pat[0] == '!';
    keep_listed = keep_listed || keep;
    bool any = false;
    for (ValueId p : g.params()) any = any || name_matches(keep ? pat.substr(1) : pat, g.value(p).name);
    if (!any) throw GraphError("--freeze '" + pat + "' matches no parameter of " + s.model);
  }
  for (ValueId p : g.params()) {
    Value& v = g.value(p);
    bool kept = false;
    for (const auto& pat : s.freeze) {
      if (!pat.empty() && pat[0] == '!') kept = kept || name_matches(pat.substr(1), v.name);
      else if (name_matches(pat, v.name)) v.trainable = false;
    }
    if (keep_listed && !kept) v.trainable = false;
    if (s.bias_only && !(v.name.size() >= 5 && v.name.compare(v.name.size() - 5, 5, ".bias") == 0)) v.trainable = false;
  }
  if (s.training) {
    sg->backward = build_backward(g, sg->loss);
    if (s.accumulation > 1) add_gradient_accumulation(g, s.accumulated_grads);
    if (s.with_update) {
      OptimizerConfig oc = s.optimizer;
      oc.state = s.effective_state();
      append_optimizer(g, oc);
    }
    sg->recompute = apply_recompute_policy(g, s.recompute);
    if (s.saved != DType::f32) sg->compress = compress_saved(g, s.saved);
    // Last: it places the updates among the nodes the passes above made.
    if (s.update_in_backward) {
      if (s.ranks > 1) throw GraphError("update in backward cannot run on several ranks (the update waits for their gradients)");
      if (!s.with_update) throw GraphError("update in backward needs the optimizer update (with_update)");
      sg->updates_in_backward = update_in_backward(g);
    }
    if (s.shard_gradients && s.with_update && s.optimizer.shards > 1)
      shard_gradients(g, s.optimizer.shard, s.optimizer.shards);
  }
  return sg;
}

}  // namespace

std::unique_ptr<StepGraph> build_step_graph(const StepSpec& s) {
  std::unique_ptr<StepGraph> sg = build_untiered(s);
  // Last of all (evaluation's graph too): it moves values the finished step reads.
  if (!s.offload.empty()) {
    if (s.ranks > 1) throw GraphError("--offload: data-parallel ranks exchange parameters in memory; offloading them "
                                      "to disk is for one process");
    TierOptions to = offload_options(s.offload);
    to.ahead = s.offload_ahead;
    sg->tier = tier_values(sg->g, to);
  }
  return sg;
}

TierOptions offload_options(const std::string& offload) {
  TierOptions o;
  if (offload == "none") return o;  // --offload none: nothing, and the fit may not offload either
  size_t at = 0;
  while (at <= offload.size()) {
    const size_t comma = offload.find(',', at);
    const std::string part = offload.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (part == "params") o.params = true;
    else if (part == "frozen") o.frozen = true;
    else if (part == "state") o.state = true;
    else if (part == "all") o.params = o.frozen = o.state = true;
    else
      throw std::invalid_argument("--offload: '" + part + "' is not one of params, frozen, state, all "
                                  "(comma-separated), or none");
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return o;
}

}  // namespace memfit::train
