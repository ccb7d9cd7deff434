// The GPT model: Hugging Face GPT-2 parameter names and layouts, the
// parameter count of the presets, weight tying, causality (a logit never
// depends on a later token), and a tiny model that learns a periodic
// sequence on the CPU.
#include <gtest/gtest.h>

#include "train_steps.hpp"

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "kernels/kernel.hpp"
#include "memfit/runtime.hpp"
#include "models/gpt.hpp"
#include "compile/step_graph.hpp"

using namespace memfit;

namespace {

std::vector<TensorSpec> tokens_of(int64_t T, int64_t vocab) {
  return {{"tokens", DType::i32, {T}, 0.0, vocab}, {"targets", DType::i32, {T}, -1.0, vocab}};
}

train::StepSpec spec_of(const std::string& model, int64_t B, int64_t T, int64_t vocab) {
  train::StepSpec s;
  s.model = model;
  s.batch = B;
  s.data = tokens_of(T, vocab);
  s.classes = vocab;
  return s;
}

}  // namespace

TEST(Gpt, HuggingFaceNamesAndLayouts) {
  train::StepSpec s = spec_of("gpt-tiny", 2, 16, 50);
  s.training = false;
  s.with_loss = false;
  const auto sg = train::build_step_graph(s);
  std::map<std::string, Shape> got;
  for (ValueId p : sg->g.params()) got[sg->g.value(p).name] = sg->g.value(p).shape;
  std::map<std::string, Shape> want{{"transformer.wte.weight", {50, 32}},
                                    {"transformer.wpe.weight", {64, 32}},
                                    {"transformer.ln_f.weight", {32}},
                                    {"transformer.ln_f.bias", {32}}};
  for (int l = 0; l < 2; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    want[p + "ln_1.weight"] = want[p + "ln_1.bias"] = want[p + "ln_2.weight"] = want[p + "ln_2.bias"] = {32};
    want[p + "attn.c_attn.weight"] = {32, 96};  // Conv1D: [in, out]
    want[p + "attn.c_attn.bias"] = {96};
    want[p + "attn.c_proj.weight"] = {32, 32};
    want[p + "attn.c_proj.bias"] = {32};
    want[p + "mlp.c_fc.weight"] = {32, 128};
    want[p + "mlp.c_fc.bias"] = {128};
    want[p + "mlp.c_proj.weight"] = {128, 32};
    want[p + "mlp.c_proj.bias"] = {32};
  }
  EXPECT_EQ(got, want);
  // Tied head: the token table is read twice (embedding and the head), and
  // there is no separate head weight.
  const ValueId wte = sg->g.find("transformer.wte.weight");
  int readers = 0;
  for (const Node& n : sg->g.nodes())
    for (ValueId v : n.inputs) readers += v == wte;
  EXPECT_EQ(readers, 2);
  EXPECT_EQ(sg->g.value(sg->logits).shape, (Shape{2, 16, 50}));
}

TEST(Gpt, PresetParameterCounts) {
  auto count = [](const std::string& model, int64_t T, int64_t vocab) {
    train::StepSpec s = spec_of(model, 1, T, vocab);
    s.training = false;
    s.with_loss = false;
    const auto sg = train::build_step_graph(s);
    int64_t n = 0;
    for (ValueId p : sg->g.params()) n += numel(sg->g.value(p).shape);
    return n;
  };
  // V C + block C + L (12 C^2 + 13 C) + 2 C.
  EXPECT_EQ(count("gpt-char", 256, 65), 65 * 384 + 256 * 384 + 6 * (12 * 384 * 384 + 13 * 384) + 2 * 384);  // 10.77M
  EXPECT_EQ(count("gpt2", 8, 50257), 124439808);         // GPT-2 small's 124M
  EXPECT_EQ(count("gpt2-medium", 8, 50257), 354823168);  // Hugging Face's gpt2-medium: 24 x 1024, 16 heads
  EXPECT_EQ(count("gpt2-large", 8, 50257), 774030080);   // gpt2-large: 36 x 1280, 20 heads
}

// --dropout P replaces a zoo GPT's dropout: gpt-char's 0.2 (embeddings,
// two residual branches per block, the attention's probabilities) becomes
// P, none at all with 0; gpt-tiny (none of its own) gets it in each place.
TEST(Gpt, DropoutFlagReplacesThePresetsProbability) {
  auto dropouts = [](const std::string& model, std::vector<std::string> flag) {
    train::StepSpec s = spec_of(model, 1, 16, 50);
    s.model_options.dropout = std::move(flag);
    const auto sg = train::build_step_graph(s);
    std::multiset<double> ps;
    for (const Node& n : sg->g.nodes()) {
      if (n.op == "dropout") ps.insert(n.attrs.f("p", -1.0));
      if (n.op == "attention" && n.attrs.f("dropout", 0.0) > 0) ps.insert(n.attrs.f("dropout", 0.0));
    }
    return ps;
  };
  auto times = [](size_t n, double p) {
    std::multiset<double> ps;
    while (n--) ps.insert(p);
    return ps;
  };
  const size_t per_char = 1 + 6 * 3, per_tiny = 1 + 2 * 3;
  EXPECT_EQ(dropouts("gpt-char", {}), times(per_char, 0.2));
  EXPECT_TRUE(dropouts("gpt-char", {"0"}).empty());
  EXPECT_EQ(dropouts("gpt-char", {"0.1"}), times(per_char, 0.1));
  EXPECT_TRUE(dropouts("gpt-tiny", {}).empty());
  EXPECT_EQ(dropouts("gpt-tiny", {"0.3"}), times(per_tiny, 0.3));
  // A bare probability is for a zoo GPT, once and alone.
  EXPECT_THROW(dropouts("gpt-tiny", {"0.1", "0.2"}), GraphError);
  EXPECT_THROW(dropouts("gpt-tiny", {"attn=0.2"}), GraphError);
}

TEST(Gpt, RefusesSequencesLongerThanItsBlockAndTooLargeVocabularies) {
  EXPECT_THROW(train::build_step_graph(spec_of("gpt-tiny", 1, 65, 50)), GraphError);
  EXPECT_THROW(train::build_step_graph(spec_of("gpt2", 1, 8, 60000)), GraphError);
}

TEST(Gpt, ALogitNeverDependsOnALaterToken) {
  train::StepSpec s = spec_of("gpt-tiny", 1, 16, 50);
  s.training = false;
  s.with_loss = false;
  const auto sg = train::build_step_graph(s);
  Executor ex(sg->g, ExecConfig{});
  ex.init_params(3);
  auto logits_for = [&](const std::vector<int32_t>& toks) {
    ex.feed(sg->inputs[0].value, toks.data(), toks.size() * sizeof(int32_t));
    ex.run(kernels::StepContext{});
    std::vector<float> l(16 * 50);
    ex.fetch(sg->logits, l.data(), l.size() * sizeof(float));
    return l;
  };
  std::vector<int32_t> a(16), b;
  for (int i = 0; i < 16; ++i) a[static_cast<size_t>(i)] = (7 * i + 1) % 50;
  b = a;
  b[10] = 42;
  const auto la = logits_for(a), lb = logits_for(b);
  for (size_t t = 0; t < 16; ++t) {
    double diff = 0;
    for (size_t v = 0; v < 50; ++v) diff = std::max(diff, std::abs(double(la[t * 50 + v]) - double(lb[t * 50 + v])));
    if (t < 10) EXPECT_EQ(diff, 0.0) << "position " << t << " saw a later token";
    else EXPECT_GT(diff, 1e-4) << "position " << t << " did not see token 10";
  }
}

TEST(Gpt, TinyModelLearnsAPeriodicSequence) {
  train::StepSpec s = spec_of("gpt-tiny", 4, 16, 20);
  s.optimizer.kind = "adam";
  const auto sg = train::build_step_graph(s);
  Executor ex(sg->g, ExecConfig{});
  ex.init_params(1);
  std::vector<int32_t> tok(4 * 16), tgt(4 * 16);
  for (size_t r = 0; r < 4; ++r)
    for (size_t t = 0; t < 16; ++t) {
      tok[r * 16 + t] = static_cast<int32_t>((r + t) % 7);
      tgt[r * 16 + t] = static_cast<int32_t>((r + t + 1) % 7);
    }
  ex.feed(sg->inputs[0].value, tok.data(), tok.size() * sizeof(int32_t));
  ex.feed(sg->inputs[1].value, tgt.data(), tgt.size() * sizeof(int32_t));
  const auto [first, last] = memfit::testing::first_and_last_loss(ex, sg->loss, 60, 3e-3);
  EXPECT_NEAR(first, std::log(20.0), 0.5);
  EXPECT_LT(last, 0.3) << "from " << first;
}
