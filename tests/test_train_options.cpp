// The options' checks in one place (train::validate): each bad option is
// refused with the message the command prints for it, and the command maps
// every one of them to a usage error (exit 2), for train and plan alike.
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>

#include "cli_util.hpp"
#include "error_of.hpp"
#include "train/options.hpp"

using memfit::train::TrainOptions;

namespace {

std::string refusal(const TrainOptions& o) {
  return memfit::testing::error_of([&] { memfit::train::validate(o); });
}

}  // namespace

TEST(TrainOptions, DefaultsAreValid) {
  TrainOptions o;
  EXPECT_EQ(refusal(o), "");
  o.eval_every = -1;  // the default: after every epoch
  o.data_in = "disk";
  o.optimizer.kind = "adamw";
  o.recompute = "segments";
  o.accumulate = 4;
  o.profile = 3;
  o.steps = 0;
  EXPECT_EQ(refusal(o), "");
  TrainOptions u;  // update in backward with what it allows
  u.update_in_backward = true;
  u.precision = memfit::DType::bf16;
  u.recompute = "cheap";
  EXPECT_EQ(refusal(u), "");
}

TEST(TrainOptions, EachBadOptionHasItsMessage) {
  struct Case {
    std::function<void(TrainOptions&)> set;
    std::string message;
  } cases[] = {
      {[](TrainOptions& o) { o.schedule = "wavy"; }, "--schedule expects constant, step or cosine, got 'wavy'"},
      {[](TrainOptions& o) { o.batch = 0; }, "--batch must be positive, got 0"},
      {[](TrainOptions& o) { o.batch = -4; }, "--batch must be positive, got -4"},
      {[](TrainOptions& o) { o.epochs = 0; }, "--epochs must be positive, got 0"},
      {[](TrainOptions& o) { o.steps = -1; }, "--steps must not be negative, got -1"},
      {[](TrainOptions& o) { o.lr = 0; }, "--lr must be positive, got 0"},
      {[](TrainOptions& o) { o.lr = -0.5; }, "--lr must be positive, got -0.5"},
      {[](TrainOptions& o) { o.eval_every = -3; }, "--eval-every expects a number of steps, or 0 for no evaluation"},
      {[](TrainOptions& o) { o.given = {"eval-every"}; }, "--eval-every expects a number of steps, or 0 for no evaluation"},
      {[](TrainOptions& o) { o.accumulate = 0; }, "--accumulate must be positive and divide --batch"},
      {[](TrainOptions& o) { o.accumulate = 3; }, "--accumulate must be positive and divide --batch"},
      {[](TrainOptions& o) { o.profile = -1; }, "--profile must be positive"},
      {[](TrainOptions& o) { o.optimizer.kind = "rmsprop"; },
       "--optimizer expects sgd, adam, adamw or adafactor, got 'rmsprop'"},
      {[](TrainOptions& o) { o.optimizer.state = "4bit"; }, "--optimizer-state expects fp32, bf16 or 8bit, got '4bit'"},
      {[](TrainOptions& o) {
         o.optimizer.kind = "adafactor";
         o.optimizer.state = "8bit";
       },
       "--optimizer-state: adafactor keeps a factored fp32 second moment (a few bytes per row and column); "
       "--optimizer-state 8bit applies to adam, adamw and sgd"},
      {[](TrainOptions& o) { o.recompute = "all"; }, "--recompute expects none, auto, cheap or segments, got 'all'"},
      {[](TrainOptions& o) { o.data_in = "ram"; }, "--data-in expects memory, disk or auto, got 'ram'"},
      // Update in backward, where a step needs all of its gradients before
      // the first update: each refusal names the two options.
      {[](TrainOptions& o) {
         o.update_in_backward = true;
         o.accumulate = 2;
       },
       "--update-in-backward updates each parameter as soon as its gradient is made, so it cannot wait for "
       "--accumulate's micro-batches: drop one of the two"},
      {[](TrainOptions& o) {
         o.update_in_backward = true;
         o.optimizer.clip_grad_norm = 1.0;
       },
       "--update-in-backward cannot clip by the global gradient norm (--clip-grad-norm needs every gradient before "
       "the first update): drop one of the two"},
      {[](TrainOptions& o) {
         o.update_in_backward = true;
         o.precision = memfit::DType::f16;
       },
       "--update-in-backward cannot skip a step whose fp16 gradients overflowed (the loss scaling of --precision "
       "fp16 decides after the whole backward): drop one of the two, or use --precision bf16"},
  };
  for (const Case& c : cases) {
    TrainOptions o;
    c.set(o);
    EXPECT_EQ(refusal(o), c.message);
    EXPECT_THROW(memfit::train::validate(o), std::invalid_argument) << c.message;
  }
}

TEST(TrainOptions, HalvedKeepsTheEffectiveBatch) {
  TrainOptions o;
  o.batch = 64;
  o.accumulate = 2;
  auto h = memfit::train::halved(o);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->batch, 64);
  EXPECT_EQ(h->accumulate, 4);
  EXPECT_EQ(memfit::train::micro_batch(*h), 16);
  EXPECT_EQ(memfit::train::halved_note(*h), "micro-batch 16 x 4 (effective batch 64 unchanged)");
  o.accumulate = 64;  // micro-batch 1
  EXPECT_FALSE(memfit::train::halved(o));
  o.batch = 48;
  o.accumulate = 16;  // micro-batch 3: odd
  EXPECT_FALSE(memfit::train::halved(o));
  // Accumulation excludes update in backward: the halved run drops it.
  TrainOptions u;
  u.batch = 64;
  u.update_in_backward = true;
  h = memfit::train::halved(u);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->accumulate, 2);
  EXPECT_FALSE(h->update_in_backward);
  EXPECT_NO_THROW(memfit::train::validate(*h));
}

// The command refuses what validate() refuses as a usage error, before
// touching any data, for plan as for train.
TEST(TrainOptions, TheCommandMakesThemUsageErrors) {
  using memfit::testing::run_memfit;
  for (const char* args : {"train --accumulate 3 --steps 1", "plan --accumulate 3", "plan --batch 0",
                           "train --data-in ram --steps 1", "plan --recompute all", "train --eval-every -1",
                           "train --update-in-backward --accumulate 2 --steps 1",
                           "train --update-in-backward --clip-grad-norm 1 --steps 1",
                           "plan --update-in-backward --precision fp16",
                           "plan --optimizer-state fp8", "train --optimizer adafactor --optimizer-state bf16 --steps 1"}) {
    auto r = run_memfit(std::string(args) + " --data /nonexistent");
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("usage: memfit"), std::string::npos) << args << "\n" << r.out;
    EXPECT_EQ(r.out.find("dataset not found"), std::string::npos) << args << "\n" << r.out;
  }
}
