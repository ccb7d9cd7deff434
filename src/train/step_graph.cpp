#include "train/step_graph.hpp"

#include "memfit/accumulate.hpp"
#include "memfit/builder.hpp"
#include "models/model_file.hpp"

namespace memfit::train {

std::unique_ptr<StepGraph> build_step_graph(const StepSpec& s) {
  auto sg = std::make_unique<StepGraph>();
  Graph& g = sg->g;
  g.model_name = s.model;
  models::ModelBuilder fn = models::resolve_model(s.model);
  Builder b(g, s.training);
  sg->x = g.input("input", {s.batch, s.channels, s.height, s.width});
  sg->labels = g.input("labels", {s.batch}, DType::i32);
  sg->logits = fn(b, sg->x, s.classes);
  g.value(sg->logits).is_output = true;
  if (!s.with_loss) return sg;
  sg->loss = softmax_xent(b, sg->logits, sg->labels, s.label_smoothing);
  g.value(sg->loss).is_output = true;
  g.value(sg->loss).is_loss = true;
  if (s.training) {
    sg->backward = build_backward(g, sg->loss);
    if (s.accumulation > 1) add_gradient_accumulation(g);
    if (s.with_update) append_optimizer(g, s.optimizer);
  }
  return sg;
}

}  // namespace memfit::train
