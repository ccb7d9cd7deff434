// Gradient accumulation: 4 micro-batches of 16 give the same optimizer steps
// as one batch of 64 (model without batch norm, whose statistics are per
// micro-batch by nature). Tolerance: the two differ only in the order of
// f32 summation over the batch (one sum of 64 terms vs four of 16, added),
// ~1e-6 relative per step; 1e-4 over 6 steps of SGD with momentum.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/kernel.hpp"
#include "memfit/accumulate.hpp"
#include "memfit/autodiff.hpp"
#include "memfit/builder.hpp"
#include "memfit/optim.hpp"
#include "memfit/runtime.hpp"
#include "compile/step_graph.hpp"

using namespace memfit;

namespace {

struct Net {
  Graph g;
  ValueId x, y, loss;
};

void build(Net& n, int64_t batch, int64_t accumulation) {
  Builder b(n.g);
  n.x = n.g.input("input", {batch, 1, 12, 12});
  n.y = n.g.input("labels", {batch}, DType::i32);
  ValueId h = conv2d(b, n.x, 6, 3, {.pad = 1, .name = "conv1"});
  h = relu(b, h);
  h = max_pool2d(b, h, 2);
  h = flatten(b, h);
  h = linear(b, h, 32, {.name = "fc1"});
  h = relu(b, h);
  h = linear(b, h, 10, {.name = "fc2"});
  n.loss = softmax_xent(b, h, n.y);
  build_backward(n.g, n.loss);
  if (accumulation > 1) add_gradient_accumulation(n.g);
  append_optimizer(n.g, {.kind = "sgd", .momentum = 0.9, .weight_decay = 1e-3});
}

}  // namespace

TEST(Accumulate, FourMicroBatchesEqualOneBatch) {
  for (Backend backend : {Backend::Reference, Backend::Cpu}) {
    Net big, small;
    build(big, 64, 1);
    build(small, 16, 4);
    ExecConfig cfg;
    cfg.backend = backend;
    Executor eb(big.g, cfg), es(small.g, cfg);
    eb.init_params(3);
    es.init_params(3);
    std::mt19937 gen(5);
    std::uniform_real_distribution<float> U(-1, 1);
    const size_t per = 144;
    const size_t nodes = small.g.num_nodes();
    for (int step = 0; step < 6; ++step) {
      std::vector<float> xs(64 * per);
      std::vector<int32_t> ys(64);
      for (auto& v : xs) v = U(gen);
      for (auto& v : ys) v = static_cast<int32_t>(gen() % 10);
      kernels::StepContext ctx;
      ctx.step = step;
      ctx.lr = 0.05;
      std::copy(xs.begin(), xs.end(), eb.ptr<float>(big.x));
      std::copy(ys.begin(), ys.end(), eb.ptr<int32_t>(big.y));
      eb.run(ctx);
      const double lb = eb.ptr<float>(big.loss)[0];
      double ls = 0;
      for (int m = 0; m < 4; ++m) {
        std::copy(xs.begin() + m * 16 * per, xs.begin() + (m + 1) * 16 * per, es.ptr<float>(small.x));
        std::copy(ys.begin() + m * 16, ys.begin() + (m + 1) * 16, es.ptr<int32_t>(small.y));
        ctx.micro = m;
        ctx.row0 = m * 16;
        es.run_nodes(0, nodes - 1, ctx);
        ls += es.ptr<float>(small.loss)[0] / 4;
      }
      ctx.grad_scale = 0.25;
      es.run_nodes(nodes - 1, nodes, ctx);
      EXPECT_NEAR(ls, lb, 1e-4 * std::abs(lb)) << backend_name(backend) << " step " << step;
    }
    for (ValueId p : big.g.params()) {
      ValueId q = small.g.find(big.g.value(p).name);
      const float* a = eb.ptr<float>(p);
      const float* c = es.ptr<float>(q);
      double d = 0, r = 0;
      for (int64_t i = 0; i < numel(big.g.value(p).shape); ++i) {
        d += (a[i] - c[i]) * (a[i] - c[i]);
        r += a[i] * a[i];
      }
      EXPECT_LE(std::sqrt(d), 1e-4 * std::sqrt(r)) << big.g.value(p).name;
    }
  }
}

// The Fashion-MNIST ConvNet, dropout included: micro-batch m draws rows
// m*16..m*16+15 of the batch-64 mask, so the trajectories still agree.
TEST(Accumulate, ConvNetWithDropoutMatchesBigBatch) {
  auto make = [](int64_t batch, int64_t acc) {
    train::StepSpec s;
    s.model = "convnet";
    s.batch = batch;
    s.accumulation = acc;
    s.optimizer = {.kind = "sgd", .momentum = 0.9, .weight_decay = 5e-4};
    return train::build_step_graph(s);
  };
  auto big = make(64, 1), small = make(16, 4);
  ExecConfig cfg;
  Executor eb(big->g, cfg), es(small->g, cfg);
  eb.init_params(11);
  es.init_params(11);
  std::mt19937 gen(9);
  std::uniform_real_distribution<float> U(-1, 1);
  const size_t per = 784, nodes = small->g.num_nodes();
  for (int step = 0; step < 4; ++step) {
    std::vector<float> xs(64 * per);
    std::vector<int32_t> ys(64);
    for (auto& v : xs) v = U(gen);
    for (auto& v : ys) v = static_cast<int32_t>(gen() % 10);
    kernels::StepContext ctx;
    ctx.step = step;
    ctx.lr = 0.02;
    ctx.seed = 42;
    std::copy(xs.begin(), xs.end(), eb.ptr<float>(big->x));
    std::copy(ys.begin(), ys.end(), eb.ptr<int32_t>(big->labels));
    eb.run(ctx);
    const double lb = eb.ptr<float>(big->loss)[0];
    double ls = 0;
    for (int m = 0; m < 4; ++m) {
      std::copy(xs.begin() + m * 16 * per, xs.begin() + (m + 1) * 16 * per, es.ptr<float>(small->x));
      std::copy(ys.begin() + m * 16, ys.begin() + (m + 1) * 16, es.ptr<int32_t>(small->labels));
      ctx.micro = m;
      ctx.row0 = m * 16;
      es.run_nodes(0, nodes - 1, ctx);
      ls += es.ptr<float>(small->loss)[0] / 4;
    }
    ctx.grad_scale = 0.25;
    es.run_nodes(nodes - 1, nodes, ctx);
    EXPECT_NEAR(ls, lb, 1e-4 * std::abs(lb)) << "step " << step;
  }
}
