// The GPT golden check against PyTorch (fixture: tests/golden/make_gpt_golden.py),
// shared by test_gpt_golden (the zoo's gpt-tiny) and test_onnx (the same GPT
// written as nanoGPT writes one, through its ONNX file).
//
// Tolerances (memfit in f32 against float64):
//  - logits: |d| <= 1e-4 * max|logit|, loss 1e-5 relative: f32 products
//    over <= 128 terms, layer norms and attention rows, ~1e-6 relative.
//  - gradients: ||g - g_ref|| <= 1e-3 ||g_ref|| per tensor, as the CNN
//    goldens: chained reductions give 1e-5..1e-4, a wrong term is O(1).
//  - the 20 losses: 1e-4 relative. Adam normalises each update, so f32
//    rounding in a small gradient is not amplified; errors stay ~1e-6 a step.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "kernels/kernel.hpp"
#include "memfit/runtime.hpp"
#include "read_tensor.hpp"
#include "compile/step_graph.hpp"

namespace memfit::testing {

inline const io::SafetensorsFile& gpt_fixture() {
  static const io::SafetensorsFile f =
      io::SafetensorsFile::load(std::string(MEMFIT_TEST_DATA) + "/golden/gpt_tiny.safetensors");
  return f;
}

// The fixture's step: batch 4 of 16 tokens, vocabulary 23, AdamW with its
// decay on the 2-d parameters only.
inline train::StepSpec gpt_golden_spec(const std::string& model) {
  const io::SafetensorsFile& f = gpt_fixture();
  constexpr int64_t T = 16, V = 23;
  train::StepSpec s;
  s.model = model;
  s.batch = 4;
  s.data = {{"tokens", DType::i32, {T}, 0.0, V}, {"targets", DType::i32, {T}, -1.0, V}};
  s.classes = V;
  s.optimizer.kind = "adamw";
  s.optimizer.weight_decay = std::stod(f.metadata().at("weight_decay"));
  s.optimizer.decay_bias_and_norm = false;  // decay on 2-d parameters only, as the fixture's groups
  return s;
}

// The fixture's index of element i of parameter p (identity where the
// layouts agree).
using FixtureIndex = std::function<size_t(const Value& p, size_t i)>;

// Feeds the fixture's batch to ex (its parameters already at the fixture's
// initial weights), checks the step-0 logits, loss and every trainable
// parameter's gradient, then the losses of steps 1..19.
inline void check_gpt_golden(const train::StepGraph& sg, Executor& ex, const FixtureIndex& index) {
  const io::SafetensorsFile& f = gpt_fixture();
  const Graph& g = sg.g;
  const auto tok = read_tensor<int32_t>(f, "tokens"), tgt = read_tensor<int32_t>(f, "targets");
  ex.feed(sg.inputs[0].value, tok.data(), tok.size() * sizeof(int32_t));
  ex.feed(sg.inputs[1].value, tgt.data(), tgt.size() * sizeof(int32_t));
  kernels::StepContext ctx;
  ctx.lr = std::stod(f.metadata().at("lr"));
  const size_t update = train::update_begin(g);
  ex.run_nodes(0, update, ctx);
  {
    const auto ref = read_tensor<double>(f, "logits");
    std::vector<float> l(ref.size());
    ex.fetch(sg.logits, l.data(), l.size() * sizeof(float));
    double mx = 0;
    for (double r : ref) mx = std::max(mx, std::abs(r));
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(l[i], ref[i], 1e-4 * mx) << "logit " << i;
    const double rl = read_tensor<double>(f, "loss")[0];
    EXPECT_NEAR(ex.fetch_scalar(sg.loss), rl, 1e-5 * rl) << "step-0 loss";
  }
  for (ValueId p : g.trainable_params()) {
    const Value& val = g.value(p);
    ASSERT_NE(val.grad, kNone) << val.name;
    const auto ref = read_tensor<double>(f, "grad." + val.name);
    std::vector<float> got(ref.size());
    ex.read_f32(val.grad, got.data());
    double d = 0, r = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double want = ref[index(val, i)];
      d += (got[i] - want) * (got[i] - want);
      r += want * want;
    }
    EXPECT_LE(std::sqrt(d), 1e-3 * std::sqrt(r) + 1e-12) << val.name << " gradient differs";
  }
  ex.run_nodes(update, g.num_nodes(), ctx);  // the step-0 update
  const auto losses = read_tensor<double>(f, "losses");
  ASSERT_EQ(losses.size(), 20u);
  for (int t = 1; t < 20; ++t) {
    ctx.step = t;
    ex.run(ctx);
    EXPECT_NEAR(ex.fetch_scalar(sg.loss), losses[static_cast<size_t>(t)], 1e-4 * losses[static_cast<size_t>(t)])
        << "step " << t;
  }
  EXPECT_LT(losses[19], losses[0] * 0.8);
}

}  // namespace memfit::testing
