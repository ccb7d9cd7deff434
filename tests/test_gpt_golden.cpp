// memfit's GPT against PyTorch (fixture: tests/golden/make_gpt_golden.py):
// gpt-tiny with the fixture's initial weights and batch must reproduce the
// step-0 logits, loss and every parameter gradient that PyTorch computes in
// float64, and the losses of 20 AdamW steps.
//
// Tolerances (memfit in f32 against float64):
//  - logits: |d| <= 1e-4 * max|logit|, loss 1e-5 relative: f32 products
//    over <= 128 terms, layer norms and attention rows, ~1e-6 relative.
//  - gradients: ||g - g_ref|| <= 1e-3 ||g_ref|| per tensor, as the CNN
//    goldens (tests/test_golden.cpp): chained reductions give 1e-5..1e-4,
//    a wrong term is O(1).
//  - the 20 losses: 1e-4 relative. Adam normalises each update, so f32
//    rounding in a small gradient is not amplified the way SGD's chaos at
//    a high rate would be; errors stay ~1e-6 per step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "read_tensor.hpp"
#include "kernels/kernel.hpp"
#include "memfit/runtime.hpp"
#include "train/step_graph.hpp"

using namespace memfit;

namespace {

template <class T>
std::vector<T> read(const io::SafetensorsFile& f, const std::string& name) {
  return memfit::testing::read_tensor<T>(f, name);
}

}  // namespace

TEST(GptGolden, TinyMatchesPyTorch) {
  const io::SafetensorsFile f = io::SafetensorsFile::load(std::string(MEMFIT_TEST_DATA) + "/golden/gpt_tiny.safetensors");
  constexpr int64_t B = 4, T = 16, V = 23;
  train::StepSpec s;
  s.model = "gpt-tiny";
  s.batch = B;
  s.data = {{"tokens", DType::i32, {T}, 0.0, V}, {"targets", DType::i32, {T}, -1.0, V}};
  s.classes = V;
  s.optimizer.kind = "adamw";
  s.optimizer.weight_decay = std::stod(f.metadata().at("weight_decay"));
  s.optimizer.decay_bias_and_norm = false;  // decay on 2-d parameters only, as the fixture's groups
  const auto sg = train::build_step_graph(s);
  // A language model's training step hands the logits' buffer to their
  // gradient (xent_rows_bwd in place); keep them to compare.
  sg->g.value(sg->logits).is_output = true;
  const Graph& g = sg->g;
  Executor ex(g, ExecConfig{});
  ex.init_params(1);
  int loaded = 0;
  for (ValueId p : g.params()) {
    const std::vector<float> w = read<float>(f, "init." + g.value(p).name);
    ASSERT_EQ(w.size(), static_cast<size_t>(numel(g.value(p).shape))) << g.value(p).name;
    ex.write_f32(p, w.data());
    ++loaded;
  }
  EXPECT_EQ(loaded, 4 + 2 * 12);
  const auto tok = read<int32_t>(f, "tokens"), tgt = read<int32_t>(f, "targets");
  ex.feed(sg->inputs[0].value, tok.data(), tok.size() * sizeof(int32_t));
  ex.feed(sg->inputs[1].value, tgt.data(), tgt.size() * sizeof(int32_t));

  kernels::StepContext ctx;
  ctx.lr = std::stod(f.metadata().at("lr"));
  const size_t update = train::update_begin(g);
  ex.run_nodes(0, update, ctx);
  {
    const auto ref = read<double>(f, "logits");
    std::vector<float> l(ref.size());
    ex.fetch(sg->logits, l.data(), l.size() * sizeof(float));
    double mx = 0;
    for (double r : ref) mx = std::max(mx, std::abs(r));
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(l[i], ref[i], 1e-4 * mx) << "logit " << i;
    const double rl = read<double>(f, "loss")[0];
    EXPECT_NEAR(ex.fetch_scalar(sg->loss), rl, 1e-5 * rl) << "step-0 loss";
  }
  for (ValueId p : g.trainable_params()) {
    const Value& val = g.value(p);
    ASSERT_NE(val.grad, kNone) << val.name;
    const auto ref = read<double>(f, "grad." + val.name);
    std::vector<float> got(ref.size());
    ex.read_f32(val.grad, got.data());
    double d = 0, r = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      d += (got[i] - ref[i]) * (got[i] - ref[i]);
      r += ref[i] * ref[i];
    }
    EXPECT_LE(std::sqrt(d), 1e-3 * std::sqrt(r) + 1e-12) << val.name << " gradient differs";
  }
  ex.run_nodes(update, g.num_nodes(), ctx);  // the step-0 update

  const auto losses = read<double>(f, "losses");
  ASSERT_EQ(losses.size(), 20u);
  for (int t = 1; t < 20; ++t) {
    ctx.step = t;
    ex.run(ctx);
    EXPECT_NEAR(ex.fetch_scalar(sg->loss), losses[static_cast<size_t>(t)], 1e-4 * losses[static_cast<size_t>(t)])
        << "step " << t;
  }
  EXPECT_LT(losses[19], losses[0] * 0.8);
}
