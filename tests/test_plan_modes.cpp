// Aliasing check: the same training graph run by three executors — the
// planned arena (reuse and in-place), --no-plan (every value its own
// buffer) and guard bytes after every buffer — must give bit-identical
// losses and final weights, and no guard may be touched. Each executor's
// transient and gradient arenas start poisoned with a different byte, so a
// kernel that reads memory nobody wrote (or that another buffer reused)
// changes the result.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "json_out.hpp"
#include "kernels/kernel.hpp"
#include "memfit/runtime.hpp"
#include "compile/step_graph.hpp"

using namespace memfit;

namespace {

struct Run {
  std::vector<float> losses;
  std::vector<std::vector<float>> weights;  // every parameter and buffer after the last step
  std::string broken;  // first buffer whose guard was overwritten
  size_t transient = 0;
};

Run run(const train::StepGraph& sg, const PlanOptions& po, uint8_t poison, int steps) {
  ExecConfig cfg;
  cfg.backend = Backend::Cpu;
  cfg.plan = po;
  cfg.verify = true;
  Executor ex(sg.g, cfg);
  ex.init_params(3);
  ex.poison(poison);
  const Graph& g = sg.g;
  float* x = ex.ptr<float>(sg.x);
  int32_t* y = ex.ptr<int32_t>(sg.labels);
  const size_t nx = static_cast<size_t>(numel(g.value(sg.x).shape));
  const int64_t n = g.value(sg.labels).shape[0];
  kernels::StepContext ctx;
  ctx.seed = 11;
  ctx.lr = 0.05;
  Run r;
  r.transient = ex.plan().arena_bytes[static_cast<size_t>(Arena::Transient)];
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < nx; ++i) x[i] = static_cast<float>(((i + 7 * s) * 2654435761u) % 997) / 997.0f - 0.5f;
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<int32_t>((i * 3 + s) % 10);
    ctx.step = s;
    ex.run(ctx);
    r.losses.push_back(*ex.ptr<float>(sg.loss));
    if (r.broken.empty()) r.broken = ex.broken_guard();
  }
  for (ValueId p : g.params()) {
    std::vector<float> w(static_cast<size_t>(numel(g.value(p).shape)));
    ex.read_f32(p, w.data());
    r.weights.push_back(std::move(w));
  }
  return r;
}

void check_model(const std::string& model, int64_t batch, int steps, bool update_in_backward = false) {
  train::StepSpec spec;
  spec.model = model;
  spec.batch = batch;
  spec.update_in_backward = update_in_backward;
  spec.optimizer.kind = "sgd";
  spec.optimizer.momentum = 0.9;
  auto sg = train::build_step_graph(spec);

  PlanOptions planned;
  PlanOptions no_plan;
  no_plan.no_plan = true;
  PlanOptions guarded;
  guarded.guard_bytes = 64;
  const Run a = run(*sg, planned, 0xFF, steps);
  const Run b = run(*sg, no_plan, 0x7F, steps);
  const Run c = run(*sg, guarded, 0x00, steps);
  std::printf("%s batch %lld: transient arena planned %zu, no-plan %zu, guarded %zu bytes; losses", model.c_str(),
              static_cast<long long>(batch), a.transient, b.transient, c.transient);
  for (float l : a.losses) std::printf(" %.6f", l);
  std::printf("\n");
  EXPECT_LT(a.transient, b.transient) << "the plan reuses nothing";
  for (int s = 0; s < steps; ++s) {
    ASSERT_TRUE(std::isfinite(a.losses[static_cast<size_t>(s)])) << model << " step " << s;
    EXPECT_EQ(std::memcmp(&a.losses[static_cast<size_t>(s)], &b.losses[static_cast<size_t>(s)], sizeof(float)), 0)
        << model << " step " << s << ": planned " << a.losses[static_cast<size_t>(s)] << ", no-plan "
        << b.losses[static_cast<size_t>(s)];
    EXPECT_EQ(std::memcmp(&a.losses[static_cast<size_t>(s)], &c.losses[static_cast<size_t>(s)], sizeof(float)), 0)
        << model << " step " << s << ": planned " << a.losses[static_cast<size_t>(s)] << ", guarded "
        << c.losses[static_cast<size_t>(s)];
  }
  const auto params = sg->g.params();
  for (size_t i = 0; i < params.size(); ++i) {
    const size_t bytes = a.weights[i].size() * sizeof(float);
    EXPECT_EQ(std::memcmp(a.weights[i].data(), b.weights[i].data(), bytes), 0)
        << model << ": '" << sg->g.value(params[i]).name << "' differs between planned and no-plan";
    EXPECT_EQ(std::memcmp(a.weights[i].data(), c.weights[i].data(), bytes), 0)
        << model << ": '" << sg->g.value(params[i]).name << "' differs between planned and guarded";
  }
  EXPECT_EQ(c.broken, "") << model << ": a kernel wrote into the guard after this buffer";
}

}  // namespace

TEST(PlanModes, ConvNetBitIdentical) { check_model("convnet", 16, 5); }

TEST(PlanModes, ResNet18BitIdentical) { check_model("resnet18", 4, 5); }

// Gradients as planned transients (update in backward): each written before
// it is read, and never overlapping a live buffer.
TEST(PlanModes, ResNet18UpdateInBackwardBitIdentical) { check_model("resnet18", 4, 5, true); }

TEST(PlanModes, GuardCatchesAnOverrun) {
  // A write one byte past a planned buffer lands in its guard.
  train::StepSpec spec;
  spec.model = "convnet";
  spec.batch = 4;
  auto sg = train::build_step_graph(spec);
  ExecConfig cfg;
  cfg.plan.guard_bytes = 16;
  Executor ex(sg->g, cfg);
  ex.init_params(1);
  EXPECT_TRUE(ex.guards_intact());
  const ValueId logits = sg->logits;
  auto* end = static_cast<unsigned char*>(ex.data(logits)) + ex.plan().values[static_cast<size_t>(logits)].bytes;
  end[0] ^= 0xFF;
  EXPECT_FALSE(ex.guards_intact());
}

TEST(PlanModes, TrainCommandFlagsGiveTheSameLoss) {
  // The same through `memfit train`: --no-plan and --guard-bytes change
  // where buffers live, never the numbers.
  auto final_loss = [](const std::string& extra) {
    const std::string cmd = std::string(MEMFIT_BINARY) +
                            " train --model convnet --batch 16 --steps 3 --subset 256 --test-subset 64 "
                            "--progress lines --json --out /tmp/memfit-test-plan-modes " +
                            extra + " 2>&1";
    FILE* f = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    while (f && std::fgets(buf, sizeof buf, f)) out += buf;
    const int rc = f ? pclose(f) : -1;
    EXPECT_EQ(rc, 0) << out;
    const double loss = memfit::testing::json_field(out, "final_train_loss");
    EXPECT_TRUE(std::isfinite(loss)) << out;
    return loss;
  };
  const double planned = final_loss("");
  EXPECT_EQ(final_loss("--no-plan"), planned);
  EXPECT_EQ(final_loss("--guard-bytes 64"), planned);
}
