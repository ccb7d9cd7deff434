// Named, typed step inputs: the step graph takes a model's inputs and target
// by name from the tensors the data holds, refuses data that does not hold
// them (naming both sides), and computes evaluation metrics in the graph.
// The language-model case checks the two paths against each other: the
// evaluation graph's loss_sum / count over [N, T] tokens must equal the
// training graph's mean cross-entropy on the same batch and parameters.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernel.hpp"
#include "memfit/builder.hpp"
#include "memfit/runtime.hpp"
#include "token_model.hpp"
#include "compile/step_graph.hpp"

using namespace memfit;

namespace {

constexpr int64_t kVocab = 37, kT = 8, kDim = 16, kBatch = 4;

// A token model: embedding, layer norm, a projection to the vocabulary.
std::shared_ptr<const models::Model> tiny_lm() {
  return memfit::testing::token_lm("tiny-lm", [](Builder& b, const models::Inputs& in, int64_t vocab) {
    ValueId h = embedding(b, in.at("tokens"), vocab, kDim, {.name = "wte"});
    h = layer_norm(b, h, {.name = "ln"});
    return linear(b, h, vocab, {.name = "head"});
  });
}

std::vector<TensorSpec> token_data() {
  return {{"tokens", DType::i32, {kT}, 0.0}, {"targets", DType::i32, {kT}, -1.0}};
}

std::string error_of(const train::StepSpec& s) {
  try {
    train::build_step_graph(s);
  } catch (const GraphError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(StepInputs, ImageModelsTakeTheImageAndLabels) {
  train::StepSpec s;
  s.model = "convnet";
  s.batch = 3;
  const auto sg = train::build_step_graph(s);
  ASSERT_EQ(sg->inputs.size(), 2u);
  EXPECT_EQ(sg->inputs[0].spec.name, "image");
  EXPECT_FALSE(sg->inputs[0].target);
  EXPECT_EQ(sg->g.value(sg->inputs[0].value).shape, (Shape{3, 1, 28, 28}));
  EXPECT_EQ(sg->inputs[1].spec.name, "labels");
  EXPECT_TRUE(sg->inputs[1].target);
  EXPECT_EQ(sg->x, sg->inputs[0].value);
  EXPECT_EQ(sg->labels, sg->inputs[1].value);
  EXPECT_EQ(sg->task, models::Task::Classification);
}

TEST(StepInputs, DataWithoutTheModelsInputIsRefusedNamingBoth) {
  train::StepSpec s;
  s.model = "convnet";
  s.data = token_data();
  const std::string e = error_of(s);
  EXPECT_NE(e.find("image f32 [C,H,W]"), std::string::npos) << e;
  EXPECT_NE(e.find("tokens i32 [8]"), std::string::npos) << e;

  train::StepSpec t;
  t.model = "tiny-lm";
  t.model_def = tiny_lm();
  t.data = {{"tokens", DType::f32, {kT}, 0.0}, {"targets", DType::i32, {kT}, -1.0}};
  const std::string e2 = error_of(t);
  EXPECT_NE(e2.find("tokens i32 [T]"), std::string::npos) << e2;
  EXPECT_NE(e2.find("tokens f32 [8]"), std::string::npos) << e2;
}

TEST(StepInputs, EvaluationMetricsAreGraphOutputs) {
  train::StepSpec s;
  s.training = false;
  s.with_loss = false;
  s.with_metrics = true;
  s.batch = 2;
  const auto sg = train::build_step_graph(s);
  EXPECT_FALSE(sg->g.value(sg->logits).is_output);
  for (ValueId v : {sg->metrics.loss_sum, sg->metrics.correct, sg->metrics.count}) {
    ASSERT_NE(v, kNone);
    EXPECT_TRUE(sg->g.value(v).is_output);
  }
}

TEST(StepInputs, LanguageModelLossAndMetricsAgree) {
  train::StepSpec s;
  s.model = "tiny-lm";
  s.model_def = tiny_lm();
  s.data = token_data();
  s.classes = kVocab;
  s.batch = kBatch;
  s.with_update = false;
  const auto train_g = train::build_step_graph(s);
  EXPECT_EQ(train_g->task, models::Task::LanguageModel);
  train::StepSpec es = s;
  es.training = false;
  es.with_loss = false;
  es.with_metrics = true;
  const auto eval_g = train::build_step_graph(es);

  std::vector<int32_t> tokens(kBatch * kT), targets(kBatch * kT);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>((7 * i + 3) % kVocab);
    targets[i] = static_cast<int32_t>((5 * i + 1) % kVocab);
  }
  for (Backend backend : {Backend::Reference64, Backend::Cpu}) {
    ExecConfig cfg;
    cfg.backend = backend;
    Executor tr(train_g->g, cfg), ev(eval_g->g, cfg);
    tr.init_params(11);
    ev.init_params(11);
    for (Executor* ex : {&tr, &ev}) {
      const train::StepGraph& sg = ex == &tr ? *train_g : *eval_g;
      ex->feed(sg.inputs[0].value, tokens.data(), tokens.size() * sizeof(int32_t));
      ex->feed(sg.inputs[1].value, targets.data(), targets.size() * sizeof(int32_t));
      ex->run(kernels::StepContext{});
    }
    const double loss = tr.fetch_scalar(train_g->loss);
    const double count = ev.fetch_scalar(eval_g->metrics.count);
    EXPECT_EQ(count, kBatch * kT) << backend_name(backend);
    // Both in f32 on the CPU (row sums in double): a few ulp of the mean.
    EXPECT_NEAR(ev.fetch_scalar(eval_g->metrics.loss_sum) / count, loss, 1e-5 * loss) << backend_name(backend);
    // Untrained: the loss is near log(vocab).
    EXPECT_NEAR(loss, std::log(static_cast<double>(kVocab)), 1.0) << backend_name(backend);
  }
}
