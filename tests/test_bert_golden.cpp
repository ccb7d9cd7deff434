// memfit's BERT against PyTorch (fixture: tests/golden/make_bert_golden.py):
// bert-tiny with the fixture's initial weights and a padded batch (one
// sequence of a single token, token types 1 on parts of two) must
// reproduce the step-0 logits, loss and every parameter gradient that a
// plain-PyTorch BertModel computes in float64, and the losses of 20 AdamW
// steps; the [CLS] head (pooler dense + tanh) and the inputs-absent path
// (no attention mask, no token types) their logits too.
//
// Tolerances (memfit in f32 against float64), those of tests/test_gpt_golden.cpp:
//  - logits: |d| <= 1e-4 * max|logit|, loss 1e-5 relative: f32 products
//    over <= 64 terms, layer norms and attention rows, ~1e-6 relative.
//  - gradients: ||g - g_ref|| <= 1e-3 ||g_ref|| per tensor, as the CNN
//    goldens (tests/test_golden.cpp): chained reductions give 1e-5..1e-4,
//    a wrong term is O(1). (The fixture stores them rounded to f32: 6e-8.)
//    The key biases' gradient is 0 by the math (softmax is unchanged when
//    q_i . b_k is added to every score of row i; PyTorch's float64 gives
//    1e-18) and memfit's f32 sum of cancelling terms is not, so for those
//    the scale is the same layer's query-bias gradient, the nonzero sum of
//    the same kind of terms: ||g|| <= 1e-3 ||g_ref(query.bias)||.
//  - the 20 losses: 1e-4 relative. Adam normalises each update, so f32
//    rounding in a small gradient is not amplified; errors stay ~1e-6 per step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "kernels/kernel.hpp"
#include "memfit/runtime.hpp"
#include "models/bert.hpp"
#include "runtime/device.hpp"
#include "compile/step_graph.hpp"

using namespace memfit;

namespace {

constexpr int64_t B = 4, T = 12, V = 24, kClasses = 3;

const io::SafetensorsFile& fixture() {
  static const io::SafetensorsFile f =
      io::SafetensorsFile::load(std::string(MEMFIT_TEST_DATA) + "/golden/bert_tiny.safetensors");
  return f;
}

template <class T>
std::vector<T> read(const std::string& name) {
  const io::TensorInfo& t = fixture().at(name);
  std::vector<T> v(static_cast<size_t>(t.numel()));
  EXPECT_EQ(t.nbytes(), v.size() * sizeof(T)) << name;
  std::memcpy(v.data(), fixture().data(t), t.nbytes());
  return v;
}

// The step of bert-tiny (or `model`) on the fixture's batch with its
// initial weights loaded by name; `with_masks`: the data holds
// attention_mask and token_type_ids.
struct GoldenStep {
  std::unique_ptr<train::StepGraph> sg;
  std::unique_ptr<Executor> ex;
};

GoldenStep start(std::shared_ptr<const models::Model> model, bool training, bool with_masks, ExecConfig cfg = {}) {
  train::StepSpec s;
  s.model = model ? model->name : "bert-tiny";
  s.model_def = std::move(model);
  s.batch = B;
  s.data = {{"tokens", DType::i32, {T}, 0.0, V}};
  if (with_masks)
    s.data.insert(s.data.end(), {{"attention_mask", DType::i32, {T}, 0.0, 2}, {"token_type_ids", DType::i32, {T}, 0.0, 2}});
  s.data.push_back({"labels", DType::i32, {}, -1.0, kClasses});
  s.classes = kClasses;
  s.training = training;
  s.with_loss = training;
  s.optimizer.kind = "adamw";
  s.optimizer.weight_decay = std::stod(fixture().metadata().at("weight_decay"));
  s.optimizer.decay_bias_and_norm = false;  // decay on 2-d parameters only, as the fixture's groups
  GoldenStep r;
  r.sg = train::build_step_graph(s);
  const Graph& g = r.sg->g;
  r.ex = std::make_unique<Executor>(g, cfg);
  r.ex->init_params(1);
  for (ValueId p : g.params()) {
    const std::vector<float> w = read<float>("init." + g.value(p).name);
    EXPECT_EQ(w.size(), static_cast<size_t>(numel(g.value(p).shape))) << g.value(p).name;
    if (w.size() == static_cast<size_t>(numel(g.value(p).shape))) r.ex->write_f32(p, w.data());
  }
  for (const train::StepInput& in : r.sg->inputs) {
    const auto v = read<int32_t>(in.spec.name);
    r.ex->feed(in.value, v.data(), v.size() * sizeof(int32_t));
  }
  return r;
}

// max |logit - ref| / max |ref|, each logit checked against 1e-4 of max |ref|.
double check_logits(Executor& ex, ValueId logits, const std::string& name) {
  const auto ref = read<double>(name);
  std::vector<float> l(ref.size());
  ex.fetch(logits, l.data(), l.size() * sizeof(float));
  double mx = 0, worst = 0;
  for (double r : ref) mx = std::max(mx, std::abs(r));
  for (size_t i = 0; i < ref.size(); ++i) {
    EXPECT_NEAR(l[i], ref[i], 1e-4 * mx) << name << " " << i;
    worst = std::max(worst, std::abs(l[i] - ref[i]) / mx);
  }
  return worst;
}

// ||g - ref|| / ||scale|| of a parameter's gradient, checked against 1e-3;
// the scale is ref itself unless `scale_name` names another tensor.
double check_grad(Executor& ex, const Graph& g, const std::string& param, const std::string& ref_name,
                  const std::string& scale_name = "") {
  const ValueId p = g.find(param);
  EXPECT_NE(p, kNone) << param;
  if (p == kNone) return 0;
  const Value& val = g.value(p);
  EXPECT_NE(val.grad, kNone) << param;
  if (val.grad == kNone) return 0;
  const auto ref = read<float>(ref_name);
  std::vector<float> got(ref.size());
  EXPECT_EQ(got.size(), static_cast<size_t>(numel(val.shape))) << param;
  ex.read_f32(val.grad, got.data());
  double d = 0, r = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    d += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    r += double(ref[i]) * ref[i];
  }
  if (!scale_name.empty()) {
    EXPECT_LE(std::sqrt(r), 1e-15) << ref_name << " is not 0 in the fixture";
    r = 0;
    for (float x : read<float>(scale_name)) r += double(x) * x;
  }
  EXPECT_LE(std::sqrt(d), 1e-3 * std::sqrt(r) + 1e-12) << param << " gradient differs";
  return std::sqrt(d) / (std::sqrt(r) + 1e-30);
}

// The mean-pooling classifier's step 0 and 20 AdamW steps on `cfg`'s device.
void check_mean_pooling(const ExecConfig& cfg) {
  GoldenStep r = start(nullptr, true, true, cfg);
  const Graph& g = r.sg->g;
  Executor& ex = *r.ex;
  EXPECT_EQ(g.params().size(), 5u + 2 * 16 + 2);  // embeddings, 2 layers, the classifier
  kernels::StepContext ctx;
  ctx.lr = std::stod(fixture().metadata().at("lr"));
  const size_t update = train::update_begin(g);
  ex.run_nodes(0, update, ctx);
  const double logit_err = check_logits(ex, r.sg->logits, "logits");
  const double rl = read<double>("loss")[0];
  EXPECT_NEAR(ex.fetch_scalar(r.sg->loss), rl, 1e-5 * rl) << "step-0 loss";
  double grad_err = 0;
  int grads = 0;
  const std::string key_bias = "attention.self.key.bias";
  for (ValueId p : g.trainable_params()) {
    const std::string& name = g.value(p).name;
    const bool zero = name.size() > key_bias.size() && name.ends_with(key_bias);
    const std::string scale = zero ? "grad." + name.substr(0, name.size() - key_bias.size()) + "attention.self.query.bias" : "";
    grad_err = std::max(grad_err, check_grad(ex, g, name, "grad." + name, scale));
    ++grads;
  }
  EXPECT_EQ(grads, static_cast<int>(g.params().size()));
  ex.run_nodes(update, g.num_nodes(), ctx);  // the step-0 update

  const auto losses = read<double>("losses");
  ASSERT_EQ(losses.size(), 20u);
  double loss_err = 0;
  for (int t = 1; t < 20; ++t) {
    ctx.step = t;
    ex.run(ctx);
    const double l = ex.fetch_scalar(r.sg->loss), want = losses[static_cast<size_t>(t)];
    EXPECT_NEAR(l, want, 1e-4 * want) << "step " << t;
    loss_err = std::max(loss_err, std::abs(l - want) / want);
  }
  EXPECT_LT(losses[19], losses[0] * 0.8);
  std::printf("bert-tiny golden: logits %.2e of max|logit|, gradients %.2e (worst relative L2), losses %.2e\n",
              logit_err, grad_err, loss_err);
}

}  // namespace

TEST(BertGolden, TinyMeanPoolingMatchesPyTorch) { check_mean_pooling({}); }

// Through the test device whose arenas the host may not address, on the
// reference kernels (runtime/device.hpp's offset_device): the same bounds.
TEST(BertGolden, TinyMeanPoolingOnTheOffsetDevice) {
  ExecConfig cfg;
  cfg.backend = Backend::Reference;
  cfg.device = &device_named("reference-offset");
  check_mean_pooling(cfg);
}

TEST(BertGolden, TinyClsHeadMatchesPyTorch) {
  models::BertConfig c{.vocab_size = 0, .hidden = 32, .layers = 2, .heads = 2, .intermediate = 64,
                       .max_position = 64, .hidden_dropout = 0.0, .attention_dropout = 0.0};
  c.pooling = models::BertPooling::Cls;
  GoldenStep r = start(std::make_shared<models::Model>(models::bert("bert-tiny-cls", c)), true, true);
  const Graph& g = r.sg->g;
  ASSERT_NE(g.find("pooler.dense.weight"), kNone);
  kernels::StepContext ctx;
  ctx.lr = 1e-3;
  r.ex->run_nodes(0, train::update_begin(g), ctx);
  const double logit_err = check_logits(*r.ex, r.sg->logits, "cls.logits");
  const double rl = read<double>("cls.loss")[0];
  EXPECT_NEAR(r.ex->fetch_scalar(r.sg->loss), rl, 1e-5 * rl) << "step-0 loss";
  double grad_err = 0;
  for (const char* p : {"pooler.dense.weight", "pooler.dense.bias", "classifier.weight", "classifier.bias",
                        "embeddings.word_embeddings.weight", "encoder.layer.0.attention.self.query.weight"})
    grad_err = std::max(grad_err, check_grad(*r.ex, g, p, std::string("cls.grad.") + p));
  std::printf("bert-tiny [CLS] golden: logits %.2e of max|logit|, gradients %.2e\n", logit_err, grad_err);
}

TEST(BertGolden, TinyWithoutMaskOrTypesMatchesPyTorch) {
  GoldenStep r = start(nullptr, false, false);
  EXPECT_EQ(r.sg->inputs.size(), 2u);  // tokens and labels: the optional inputs are left out
  r.ex->run(kernels::StepContext{});
  const double logit_err = check_logits(*r.ex, r.sg->logits, "nomask.logits");
  std::printf("bert-tiny golden without mask or types: logits %.2e of max|logit|\n", logit_err);
}
