// The BERT model: Hugging Face BertModel's parameter names and layouts, the
// MiniLM preset's parameter count, the optional inputs, padding that never
// reaches the result (and a sequence that is all padding: no NaN), the
// pooling pieces' gradients, the config.json reader, and bert-tiny training
// through the step graph with a verified plan and guard bytes.
#include <gtest/gtest.h>

#include "train_steps.hpp"

#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "cli_util.hpp"
#include "error_of.hpp"
#include "graph_run.hpp"
#include "gradcheck.hpp"
#include "kernels/kernel.hpp"
#include "memfit/runtime.hpp"
#include "models/bert.hpp"
#include "compile/step_graph.hpp"
#include "compile/resolve.hpp"

using namespace memfit;
namespace mt = memfit::testing;

namespace {

constexpr int64_t kVocab = 30, kClasses = 3;

// tokens [T] (vocabulary `vocab`), attention_mask and token_type_ids if
// `masks`, labels.
std::vector<TensorSpec> text_of(int64_t T, int64_t vocab, bool masks = true, int64_t types = 2) {
  std::vector<TensorSpec> d{{"tokens", DType::i32, {T}, 0.0, vocab}};
  if (masks)
    d.insert(d.end(), {{"attention_mask", DType::i32, {T}, 0.0, 2}, {"token_type_ids", DType::i32, {T}, 0.0, types}});
  d.push_back({"labels", DType::i32, {}, -1.0, kClasses});
  return d;
}

train::StepSpec spec_of(const std::string& model, int64_t B, int64_t T, int64_t vocab, bool masks = true) {
  train::StepSpec s;
  s.model = model;
  s.batch = B;
  s.data = text_of(T, vocab, masks);
  s.classes = kClasses;
  return s;
}

train::StepSpec eval_spec(train::StepSpec s) {
  s.training = false;
  s.with_loss = false;
  return s;
}

models::BertConfig tiny(models::BertPooling pooling = models::BertPooling::Mean, double dropout = 0.0) {
  return {.vocab_size = 0, .hidden = 32, .layers = 2, .heads = 2, .intermediate = 64, .max_position = 64,
          .hidden_dropout = dropout, .attention_dropout = dropout, .pooling = pooling};
}

std::shared_ptr<const models::Model> model_of(const std::string& name, const models::BertConfig& c) {
  return std::make_shared<models::Model>(models::bert(name, c));
}

// A batch of B sequences of T: lengths[b] real tokens (>= 1 id), then padding.
struct Batch {
  std::vector<int32_t> tokens, mask, types, labels;
};
Batch batch_of(const std::vector<int>& lengths, int64_t T) {
  Batch x;
  for (size_t b = 0; b < lengths.size(); ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const bool real = t < lengths[b];
      x.tokens.push_back(real ? static_cast<int32_t>(1 + (7 * b + 3 * static_cast<size_t>(t)) % (kVocab - 1)) : 0);
      x.mask.push_back(real);
      x.types.push_back(real && t >= lengths[b] / 2);
    }
    x.labels.push_back(static_cast<int32_t>(b % kClasses));
  }
  return x;
}

void feed(Executor& ex, const train::StepGraph& sg, const Batch& x) {
  for (const train::StepInput& in : sg.inputs) {
    const std::vector<int32_t>& v = in.spec.name == "tokens"           ? x.tokens
                                    : in.spec.name == "attention_mask" ? x.mask
                                    : in.spec.name == "token_type_ids" ? x.types
                                                                       : x.labels;
    ex.feed(in.value, v.data(), v.size() * sizeof(int32_t));
  }
}

std::vector<float> logits_of(Executor& ex, const train::StepGraph& sg) {
  std::vector<float> l(static_cast<size_t>(numel(sg.g.value(sg.logits).shape)));
  ex.fetch(sg.logits, l.data(), l.size() * sizeof(float));
  return l;
}

}  // namespace

TEST(Bert, HuggingFaceNamesAndLayouts) {
  const auto sg = train::build_step_graph(eval_spec(spec_of("bert-tiny", 2, 16, kVocab)));
  std::map<std::string, Shape> got;
  for (ValueId p : sg->g.params()) got[sg->g.value(p).name] = sg->g.value(p).shape;
  std::map<std::string, Shape> want{{"embeddings.word_embeddings.weight", {kVocab, 32}},
                                    {"embeddings.position_embeddings.weight", {64, 32}},
                                    {"embeddings.token_type_embeddings.weight", {2, 32}},
                                    {"embeddings.LayerNorm.weight", {32}},
                                    {"embeddings.LayerNorm.bias", {32}},
                                    {"classifier.weight", {kClasses, 32}},
                                    {"classifier.bias", {kClasses}}};
  for (int l = 0; l < 2; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    for (const char* n : {"attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"}) {
      want[p + n + ".weight"] = {32, 32};  // nn.Linear: [out, in]
      want[p + n + ".bias"] = {32};
    }
    want[p + "intermediate.dense.weight"] = {64, 32};
    want[p + "intermediate.dense.bias"] = {64};
    want[p + "output.dense.weight"] = {32, 64};
    want[p + "output.dense.bias"] = {32};
    for (const char* n : {"attention.output.LayerNorm", "output.LayerNorm"})
      want[p + n + ".weight"] = want[p + n + ".bias"] = {32};
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(sg->g.value(sg->logits).shape, (Shape{2, kClasses}));
  // Biases and layer norms are exempt from weight decay; weights and tables are not.
  for (ValueId p : sg->g.params()) {
    const Value& v = sg->g.value(p);
    const bool exempt = v.name.ends_with(".bias") || v.name.find("LayerNorm") != std::string::npos;
    EXPECT_EQ(v.no_weight_decay, exempt) << v.name;
  }
  // The [CLS] head adds BertModel's pooler.
  train::StepSpec s = eval_spec(spec_of("cls", 2, 16, kVocab));
  s.model_def = model_of("cls", tiny(models::BertPooling::Cls));
  const auto cls = train::build_step_graph(s);
  EXPECT_EQ(cls->g.params().size(), sg->g.params().size() + 2);
  EXPECT_EQ(cls->g.value(cls->g.find("pooler.dense.weight")).shape, (Shape{32, 32}));
  EXPECT_EQ(cls->g.value(cls->g.find("pooler.dense.bias")).shape, (Shape{32}));
}

TEST(Bert, MiniLmPresetHasAllMiniLmL6V2sParameters) {
  for (const char* name : {"minilm", "bert"}) {
    const auto sg = train::build_step_graph(eval_spec(spec_of(name, 1, 16, 30522)));
    int64_t n = 0;
    for (ValueId p : sg->g.params()) n += numel(sg->g.value(p).shape);
    // BertModel without its pooler: 22,713,216 - 147,840; then the classifier.
    EXPECT_EQ(n, 22565376 + kClasses * 384 + kClasses) << name;
    EXPECT_EQ(sg->g.value(sg->g.find("embeddings.position_embeddings.weight")).shape, (Shape{512, 384}));
  }
}

TEST(Bert, MaskAndTokenTypesAreOptional) {
  auto inputs = [](std::vector<TensorSpec> data) {
    train::StepSpec s = spec_of("bert-tiny", 2, 8, kVocab);
    s.data = std::move(data);
    std::vector<std::string> names;
    const auto sg = train::build_step_graph(s);
    for (const auto& in : sg->inputs) names.push_back(in.spec.name);
    return names;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(inputs(text_of(8, kVocab, false)), (V{"tokens", "labels"}));
  EXPECT_EQ(inputs(text_of(8, kVocab, true)), (V{"tokens", "attention_mask", "token_type_ids", "labels"}));
  std::vector<TensorSpec> mask_only = text_of(8, kVocab, true);
  mask_only.erase(mask_only.begin() + 2);
  EXPECT_EQ(inputs(mask_only), (V{"tokens", "attention_mask", "labels"}));
}

TEST(Bert, RefusesLongSequencesAndLargeVocabulariesNamingThem) {
  const std::string long_seq = mt::error_of<GraphError>([] { train::build_step_graph(spec_of("bert-tiny", 1, 65, kVocab)); });
  EXPECT_NE(long_seq.find("at most 64 tokens"), std::string::npos) << long_seq;
  const std::string vocab = mt::error_of<GraphError>([] { train::build_step_graph(spec_of("minilm", 1, 8, 40000)); });
  EXPECT_NE(vocab.find("vocabulary of 30522"), std::string::npos) << vocab;
  train::StepSpec s = spec_of("bert-tiny", 1, 8, kVocab);
  s.data = text_of(8, kVocab, true, 3);
  const std::string types = mt::error_of<GraphError>([&] { train::build_step_graph(s); });
  EXPECT_NE(types.find("2 token types"), std::string::npos) << types;
}

// Padded positions (mask 0) change nothing, whatever their tokens and types:
// the same logits to the bit, for both heads.
TEST(Bert, PaddingNeverReachesTheLogits) {
  for (auto pooling : {models::BertPooling::Mean, models::BertPooling::Cls}) {
    train::StepSpec s = eval_spec(spec_of("bert", 3, 10, kVocab));
    s.model_def = model_of("bert", tiny(pooling));
    const auto sg = train::build_step_graph(s);
    Executor ex(sg->g, ExecConfig{});
    ex.init_params(3);
    Batch x = batch_of({10, 6, 2}, 10);
    feed(ex, *sg, x);
    ex.run(kernels::StepContext{});
    const auto a = logits_of(ex, *sg);
    for (size_t i = 0; i < x.tokens.size(); ++i)
      if (!x.mask[i]) {
        x.tokens[i] = static_cast<int32_t>(5 + i % 20);
        x.types[i] = 1;
      }
    feed(ex, *sg, x);
    ex.run(kernels::StepContext{});
    EXPECT_EQ(a, logits_of(ex, *sg)) << (pooling == models::BertPooling::Cls ? "cls" : "mean");
    // And a real token does change them.
    x.tokens[3] = 17;
    feed(ex, *sg, x);
    ex.run(kernels::StepContext{});
    EXPECT_NE(a, logits_of(ex, *sg));
  }
}

// A sequence that is all padding: its attention rows attend no key (0, not
// NaN), its mean is 0, so its logits are the classifier's bias; and the
// training step's loss and gradients stay finite.
TEST(Bert, AllPaddingSequenceGivesNoNaN) {
  train::StepSpec s = spec_of("bert-tiny", 3, 8, kVocab);
  s.optimizer.kind = "adamw";
  const auto sg = train::build_step_graph(s);
  Executor ex(sg->g, ExecConfig{});
  ex.init_params(4);
  feed(ex, *sg, batch_of({8, 3, 0}, 8));
  kernels::StepContext ctx;
  ctx.lr = 1e-3;
  ex.run_nodes(0, train::update_begin(sg->g), ctx);
  EXPECT_TRUE(std::isfinite(ex.fetch_scalar(sg->loss)));
  const auto l = logits_of(ex, *sg);
  std::vector<float> bias(kClasses);
  ex.read_f32(sg->g.find("classifier.bias"), bias.data());
  for (size_t c = 0; c < kClasses; ++c) EXPECT_EQ(l[2 * kClasses + c], bias[c]) << "class " << c;
  for (float v : l) EXPECT_TRUE(std::isfinite(v));
  for (ValueId p : sg->g.trainable_params()) {
    std::vector<float> gr(static_cast<size_t>(numel(sg->g.value(p).shape)));
    ex.read_f32(sg->g.value(p).grad, gr.data());
    for (float v : gr) ASSERT_TRUE(std::isfinite(v)) << sg->g.value(p).name;
  }
}

TEST(BertGrad, MeanPoolWithAMaskAndAnEmptyRow) {
  mt::grad_check({mt::f32_input({3, 5, 4}),
                       {.shape = {3, 5}, .dtype = DType::i32, .differentiable = false,
                        .values = {1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1}}},
                      [](Builder& b, const mt::Ins& in) { return models::mean_pool(b, in[0], in[1]); });
}

TEST(BertGrad, MeanPoolWithoutAMask) {
  mt::grad_check({mt::f32_input({2, 3, 4})},
                      [](Builder& b, const mt::Ins& in) { return models::mean_pool(b, in[0], kNone); });
}

TEST(BertGrad, Tanh) {
  std::vector<double> x;
  for (int i = 0; i < 24; ++i) x.push_back(-6.0 + 0.5 * i);
  mt::grad_check({{.shape = {4, 6}, .values = x}},
                      [](Builder& b, const mt::Ins& in) { return models::tanh_of(b, in[0]); });
}

// The pieces' values on the fast CPU kernels: tanh to f32 rounding, and the
// masked mean (0 for a row without tokens).
TEST(BertPieces, TanhAndMeanPoolValues) {
  Graph g;
  Builder b(g, false);
  const ValueId x = g.input("x", {2, 4, 3});
  const ValueId m = g.input("m", {2, 4}, DType::i32);
  const ValueId t = models::tanh_of(b, x), p = models::mean_pool(b, x, m);
  mt::GraphData d;
  for (int i = 0; i < 24; ++i) d.floats[x].push_back(static_cast<float>(-4.0 + 0.37 * i));
  d.ints[m] = {1, 0, 1, 1, 0, 0, 0, 0};
  const auto out = mt::run_graph(g, Backend::Cpu, d, {t, p});
  for (size_t i = 0; i < 24; ++i) EXPECT_NEAR(out.at(t)[i], std::tanh(d.floats[x][i]), 2e-7) << i;
  for (size_t c = 0; c < 3; ++c) {
    const auto& v = d.floats[x];
    EXPECT_NEAR(out.at(p)[c], (v[c] + v[6 + c] + v[9 + c]) / 3.0, 1e-6) << c;
    EXPECT_EQ(out.at(p)[3 + c], 0.0f) << c;
  }
}

TEST(Bert, ConfigFromHuggingFaceJson) {
  const std::string dir = mt::temp_dir("bert-config");
  auto write = [](const std::string& path, const std::string& text) { std::ofstream(path) << text; };
  write(dir + "/config.json", R"({"architectures": ["BertModel"], "model_type": "bert", "hidden_act": "gelu",
    "vocab_size": 100, "hidden_size": 48, "num_hidden_layers": 3, "num_attention_heads": 4,
    "intermediate_size": 96, "max_position_embeddings": 40, "type_vocab_size": 1, "layer_norm_eps": 1e-7,
    "hidden_dropout_prob": 0.05, "attention_probs_dropout_prob": 0.0})");
  models::BertConfig c = models::bert_config_from_json(dir);
  EXPECT_EQ(c.vocab_size, 100);
  EXPECT_EQ(c.hidden, 48);
  EXPECT_EQ(c.layers, 3);
  EXPECT_EQ(c.heads, 4);
  EXPECT_EQ(c.intermediate, 96);
  EXPECT_EQ(c.max_position, 40);
  EXPECT_EQ(c.type_vocab_size, 1);
  EXPECT_EQ(c.layer_norm_eps, 1e-7);
  EXPECT_EQ(c.hidden_dropout, 0.05);
  EXPECT_EQ(c.attention_dropout, 0.0);
  EXPECT_EQ(c.pooling, models::BertPooling::Mean);
  // A sentence-transformers folder's pooling.
  std::filesystem::create_directories(dir + "/1_Pooling");
  write(dir + "/1_Pooling/config.json", R"({"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false})");
  EXPECT_EQ(models::bert_config_from_json(dir + "/config.json").pooling, models::BertPooling::Cls);
  // The folder is a model name.
  const models::Model m = models::resolve(dir);
  EXPECT_EQ(m.name, dir);
  train::StepSpec s = eval_spec(spec_of(dir, 2, 40, 100));
  s.data = text_of(40, 100, true, 1);
  const auto sg = train::build_step_graph(s);
  EXPECT_EQ(sg->g.value(sg->g.find("encoder.layer.2.intermediate.dense.weight")).shape, (Shape{96, 48}));
  EXPECT_NE(sg->g.find("pooler.dense.weight"), kNone);

  auto error = [&](const std::string& text) {
    write(dir + "/bad.json", text);
    return mt::error_of<std::runtime_error>([&] { models::bert_config_from_json(dir + "/bad.json"); });
  };
  EXPECT_NE(error(R"({"model_type": "gpt2"})").find("model_type is 'gpt2'"), std::string::npos);
  EXPECT_NE(error(R"({"hidden_act": "relu"})").find("hidden_act 'relu'"), std::string::npos);
  EXPECT_NE(error(R"({"vocab_size": 5})").find("no field 'hidden_size'"), std::string::npos);
  EXPECT_NE(error(R"({"vocab_size": "many"})").find("'vocab_size' is \"many\""), std::string::npos);
  EXPECT_NE(error("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(mt::error_of<std::runtime_error>([&] { models::bert_config_from_json(dir + "/none"); }).find("cannot read"),
            std::string::npos);
}

// bert-tiny's training step through build_step_graph, planned and checked
// (verify_plan, guard bytes after every buffer), learns a fixed padded
// batch; with dropout on, the loss falls too.
TEST(Bert, TinyTrainsThroughTheStepGraph) {
  for (double p : {0.0, 0.1}) {
    train::StepSpec s = spec_of("bert", 6, 12, kVocab);
    s.model_def = model_of("bert", tiny(models::BertPooling::Mean, p));
    s.optimizer.kind = "adamw";
    s.optimizer.weight_decay = 0.01;
    s.optimizer.decay_bias_and_norm = false;
    const auto sg = train::build_step_graph(s);
    ExecConfig cfg;
    cfg.verify = true;
    cfg.plan.guard_bytes = 64;
    Executor ex(sg->g, cfg);
    ex.init_params(2);
    feed(ex, *sg, batch_of({12, 9, 7, 4, 2, 1}, 12));
    const auto [first, last] = memfit::testing::first_and_last_loss(ex, sg->loss, 30, 3e-3);
    EXPECT_TRUE(ex.guards_intact()) << ex.broken_guard();
    EXPECT_NEAR(first, std::log(double(kClasses)), 0.3) << "dropout " << p;
    EXPECT_LT(last, 0.3 * first) << "dropout " << p << ": from " << first;
  }
}
