// AdamW parameter groups stated by the model: with
// OptimizerConfig::decay_bias_and_norm = false the optimizer leaves
// undecayed exactly the parameters marked Value::no_weight_decay (biases and
// norm scales/shifts, marked by the builder; anything a model marks itself).
//  - For every zoo model, model file and a token model (embedding, layer
//    norm, linear), the decayed set is the one the former rule chose (every
//    parameter of more than one axis).
//  - A model that marks a 2-d weight no-decay: one AdamW step on the double
//    reference leaves it undecayed and decays the others, against a hand
//    computation in double.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/kernel.hpp"
#include "memfit/autodiff.hpp"
#include "memfit/builder.hpp"
#include "memfit/optim.hpp"
#include "memfit/runtime.hpp"
#include "models/zoo.hpp"
#include "compile/step_graph.hpp"

using namespace memfit;

namespace {

// (parameter name, decayed) as the update node has them.
std::vector<std::pair<std::string, bool>> decayed(const Graph& g) {
  for (const Node& n : g.nodes()) {
    if (n.phase != Phase::Update || (n.op != "adam_update" && n.op != "sgd_update")) continue;
    const std::vector<int64_t>& d = n.attrs.ints("decay");
    std::vector<std::pair<std::string, bool>> r;
    for (size_t i = 0; i < d.size(); ++i) r.push_back({g.value(n.inputs[i]).name, d[i] != 0});
    return r;
  }
  ADD_FAILURE() << "no update node";
  return {};
}

std::vector<ValueId> update_params(const Graph& g) {
  for (const Node& n : g.nodes())
    if (n.phase == Phase::Update && (n.op == "adam_update" || n.op == "sgd_update"))
      return std::vector<ValueId>(n.inputs.begin(), n.inputs.begin() + n.attrs.i("count"));
  return {};
}

void expect_one_d_rule(const Graph& g, const std::string& what) {
  const auto d = decayed(g);
  EXPECT_FALSE(d.empty()) << what;
  int undecayed = 0;
  for (size_t i = 0; i < d.size(); ++i) {
    const Value& v = g.value(update_params(g)[i]);
    EXPECT_EQ(d[i].second, v.shape.size() > 1) << what << ": " << d[i].first << " " << shape_str(v.shape);
    undecayed += !d[i].second;
  }
  EXPECT_GT(undecayed, 0) << what << ": no parameter group without decay";
}

OptimizerConfig adamw_groups() {
  OptimizerConfig o;
  o.kind = "adamw";
  o.weight_decay = 0.05;
  o.decay_bias_and_norm = false;
  return o;
}

}  // namespace

TEST(DecayGroups, ZooAndModelFilesMatchTheOneAxisRule) {
  std::vector<std::string> models = models::model_names();
  for (const char* f : {"convnet.mf", "resnet18.mf"}) models.push_back(std::string(MEMFIT_TEST_DATA) + "/../models/files/" + f);
  for (const std::string& m : models) {
    for (const char* kind : {"adamw", "adam", "sgd"}) {
      train::StepSpec s;
      s.model = m;
      s.batch = 2;
      if (m.find("resnet18") != std::string::npos) s.channels = 3, s.height = s.width = 32;
      s.optimizer = adamw_groups();
      s.optimizer.kind = kind;
      const auto sg = train::build_step_graph(s);
      expect_one_d_rule(sg->g, m + " " + kind);
    }
  }
}

TEST(DecayGroups, TokenModelMatchesTheOneAxisRule) {
  Graph g;
  Builder b(g, true);
  const ValueId tok = g.input("tokens", {2, 5}, DType::i32);
  const ValueId tgt = g.input("targets", {2, 5}, DType::i32);
  ValueId h = embedding(b, tok, 11, 8, {.name = "wte"});
  h = layer_norm(b, h, {.name = "ln"});
  h = linear(b, h, 11, {.name = "head"});
  const ValueId loss = xent_rows(b, h, tgt);
  g.value(loss).is_output = true;
  build_backward(g, loss);
  append_optimizer(g, adamw_groups());
  expect_one_d_rule(g, "token model");
}

TEST(DecayGroups, DecayEverythingStillDecaysEverything) {
  train::StepSpec s;
  s.batch = 2;
  s.optimizer = adamw_groups();
  s.optimizer.decay_bias_and_norm = true;
  const auto sg = train::build_step_graph(s);
  for (const auto& [name, d] : decayed(sg->g)) EXPECT_TRUE(d) << name;
}

TEST(DecayGroups, NoWeightDecayRefusesANonParameter) {
  Graph g;
  Builder b(g, true);
  const ValueId x = g.input("x", {2, 3});
  EXPECT_THROW(no_weight_decay(b, x), GraphError);
}

TEST(DecayGroups, ModelMarkedTwoAxisWeightStaysUndecayed) {
  // fc1.weight [4, 3] marked no-decay by the model; fc2.weight decayed;
  // both biases undecayed (builder).
  Graph g;
  Builder b(g, true);
  const ValueId x = g.input("x", {2, 3});
  const ValueId y = g.input("labels", {2}, DType::i32);
  ValueId h = linear(b, x, 4, {.name = "fc1"});
  for (ValueId p : g.params())
    if (g.value(p).name == "fc1.weight") no_weight_decay(b, p);
  h = linear(b, relu(b, h), 3, {.name = "fc2"});
  const ValueId loss = softmax_xent(b, h, y);
  g.value(loss).is_output = true;
  g.value(loss).is_loss = true;
  build_backward(g, loss);
  OptimizerConfig oc = adamw_groups();
  oc.weight_decay = 0.3;  // large, so that a wrong group shows far above rounding
  append_optimizer(g, oc);

  const auto d = decayed(g);
  const std::vector<std::pair<std::string, bool>> want{
      {"fc1.weight", false}, {"fc1.bias", false}, {"fc2.weight", true}, {"fc2.bias", false}};
  EXPECT_EQ(d, want);

  ExecConfig cfg;
  cfg.backend = Backend::Reference64;
  Executor ex(g, cfg);
  ex.init_params(3);
  const double xs[6] = {0.5, -1.0, 2.0, 1.5, 0.25, -0.75};
  for (int i = 0; i < 6; ++i) ex.ptr<double>(x)[i] = xs[i];
  ex.ptr<int32_t>(y)[0] = 2;
  ex.ptr<int32_t>(y)[1] = 0;
  std::vector<std::vector<double>> before;
  const std::vector<ValueId> params = update_params(g);
  ASSERT_EQ(params.size(), want.size());
  for (ValueId p : params) {
    const double* w = ex.ptr<double>(p);
    before.emplace_back(w, w + numel(g.value(p).shape));
  }
  kernels::StepContext ctx;
  ctx.lr = 0.01;
  ex.run(ctx);
  // AdamW, step 1 (torch.optim.AdamW): w <- w (1 - lr wd [decayed]); m = (1 -
  // b1) g, v = (1 - b2) g^2; w <- w - lr (m / (1 - b1)) / (sqrt(v / (1 - b2)) + eps).
  for (size_t k = 0; k < params.size(); ++k) {
    const ValueId p = params[k];
    const double* w = ex.ptr<double>(p);
    const double* gr = ex.ptr<double>(g.value(p).grad);
    const double wd = want[k].second ? oc.weight_decay : 0.0;
    for (size_t i = 0; i < before[k].size(); ++i) {
      const double m = (1 - oc.beta1) * gr[i], v = (1 - oc.beta2) * gr[i] * gr[i];
      const double expect =
          before[k][i] * (1 - ctx.lr * wd) - ctx.lr * (m / (1 - oc.beta1)) / (std::sqrt(v / (1 - oc.beta2)) + oc.eps);
      EXPECT_NEAR(w[i], expect, 1e-15) << g.value(p).name << "[" << i << "]";
      if (!want[k].second) {
        // undecayed: the step is the Adam step alone, ~lr sign(g)
        const double no_decay = before[k][i] - ctx.lr * gr[i] / (std::abs(gr[i]) + oc.eps);
        EXPECT_NEAR(w[i], no_decay, 1e-12) << g.value(p).name << "[" << i << "]";
      }
    }
  }
}
