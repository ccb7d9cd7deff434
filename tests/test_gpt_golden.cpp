// memfit's GPT against PyTorch (fixture: tests/golden/make_gpt_golden.py):
// gpt-tiny with the fixture's initial weights and batch must reproduce the
// step-0 logits, loss and every parameter gradient that PyTorch computes in
// float64, and the losses of 20 AdamW steps.
//
// The check and its tolerances are in gpt_golden_check.hpp, which
// test_onnx shares for the same GPT imported from ONNX.
#include <gtest/gtest.h>

#include <vector>

#include "gpt_golden_check.hpp"
#include "runtime/device.hpp"

using namespace memfit;

namespace {

void check_tiny(const ExecConfig& cfg) {
  const io::SafetensorsFile& f = memfit::testing::gpt_fixture();
  const auto sg = train::build_step_graph(memfit::testing::gpt_golden_spec("gpt-tiny"));
  // A language model's training step hands the logits' buffer to their
  // gradient (xent_rows_bwd in place); keep them to compare.
  sg->g.value(sg->logits).is_output = true;
  const Graph& g = sg->g;
  Executor ex(g, cfg);
  ex.init_params(1);
  int loaded = 0;
  for (ValueId p : g.params()) {
    const std::vector<float> w = memfit::testing::read_tensor<float>(f, "init." + g.value(p).name);
    ASSERT_EQ(w.size(), static_cast<size_t>(numel(g.value(p).shape))) << g.value(p).name;
    ex.write_f32(p, w.data());
    ++loaded;
  }
  EXPECT_EQ(loaded, 4 + 2 * 12);
  memfit::testing::check_gpt_golden(*sg, ex, [](const Value&, size_t i) { return i; });
}

}  // namespace

TEST(GptGolden, TinyMatchesPyTorch) { check_tiny({}); }

// Through the test device whose arenas the host may not address, on the
// reference kernels (runtime/device.hpp's offset_device): the same bounds.
TEST(GptGolden, TinyOnTheOffsetDevice) {
  ExecConfig cfg;
  cfg.backend = Backend::Reference;
  cfg.device = &device_named("reference-offset");
  check_tiny(cfg);
}
