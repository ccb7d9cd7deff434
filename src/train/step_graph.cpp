#include "train/step_graph.hpp"

#include <fnmatch.h>

#include <stdexcept>

#include "memfit/accumulate.hpp"
#include "memfit/builder.hpp"
#include "models/model_file.hpp"

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

std::unique_ptr<StepGraph> build_step_graph(const StepSpec& s) {
  auto sg = std::make_unique<StepGraph>();
  Graph& g = sg->g;
  g.model_name = s.model;
  models::ModelBuilder fn = models::resolve_model(s.model);
  Builder b(g, s.training);
  sg->x = g.input("input", {s.batch, s.channels, s.height, s.width});
  sg->labels = g.input("labels", {s.batch}, DType::i32);
  if (s.precision == DType::f32) {
    sg->logits = fn(b, sg->x, s.classes);
  } else {
    // The input is cast once on entry and the logits back to f32 for the
    // loss (softmax and its log-sum-exp need f32 range and precision).
    const ValueId x = cast(b, sg->x, s.precision);
    sg->logits = cast(b, fn(b, x, s.classes), DType::f32);
    g.node(g.value(sg->logits).producer).attrs.set("grad_loss_scale", int64_t(1));
  }
  g.value(sg->logits).is_output = true;
  if (!s.with_loss) return sg;
  sg->loss = softmax_xent(b, sg->logits, sg->labels, s.label_smoothing);
  g.value(sg->loss).is_output = true;
  g.value(sg->loss).is_loss = true;
  for (const auto& pat : s.freeze) {
    bool any = false;
    for (ValueId p : g.params()) any = any || name_matches(pat, g.value(p).name);
    if (!any) throw GraphError("--freeze '" + pat + "' matches no parameter of " + s.model);
  }
  for (ValueId p : g.params()) {
    Value& v = g.value(p);
    for (const auto& pat : s.freeze)
      if (name_matches(pat, v.name)) v.trainable = false;
    if (s.bias_only && !(v.name.size() >= 5 && v.name.compare(v.name.size() - 5, 5, ".bias") == 0)) v.trainable = false;
  }
  if (s.training) {
    sg->backward = build_backward(g, sg->loss);
    if (s.accumulation > 1) add_gradient_accumulation(g);
    if (s.with_update) append_optimizer(g, s.optimizer);
    sg->recompute = apply_recompute_policy(g, s.recompute);
    if (s.saved != DType::f32) sg->compress = compress_saved(g, s.saved);
  }
  return sg;
}

}  // namespace memfit::train
