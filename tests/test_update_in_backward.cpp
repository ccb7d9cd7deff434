// Update in backward: the one update node becomes one per parameter, each
// scheduled once its gradient is complete and its parameter read for the
// last time (a GPT's tied token table: after the embedding's backward, the
// last), every state group and per-tensor attribute sliced; gradients become
// planned transients; 20 training steps end bit-identical to the update
// after backward (SGD with momentum, AdamW with decay groups; a ConvNet and
// a GPT, with and without recomputation, bf16 activations); the plan's
// gradients shrink to the most live at once; and what needs every gradient
// first is refused.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cli_util.hpp"
#include "spec_steps.hpp"
#include "kernels/kernel.hpp"
#include "memfit/builder.hpp"
#include "memfit/op_registry.hpp"
#include "memfit/optim.hpp"
#include "memfit/runtime.hpp"
#include "compile/step_graph.hpp"

using namespace memfit;
using memfit::testing::Trained;
using memfit::testing::train_steps;

namespace {

train::StepSpec gpt_tiny(const std::string& optimizer, bool uib) { return memfit::testing::gpt_tiny_spec(optimizer, uib); }
train::StepSpec convnet(bool uib) { return memfit::testing::convnet_spec(uib); }

// SGD with momentum and L2 decay, or AdamW decaying only the 2-d weights
// (the decay groups: biases and norms exempt).
train::StepSpec with_optimizer(train::StepSpec s, const std::string& kind) {
  s.optimizer = {};
  s.optimizer.kind = kind;
  if (kind == "sgd") {
    s.optimizer.momentum = 0.9;
    s.optimizer.weight_decay = 5e-4;
  } else {
    s.optimizer.weight_decay = 0.1;
    s.optimizer.decay_bias_and_norm = false;
  }
  return s;
}

void expect_bit_identical(const train::StepSpec& spec, int steps) {
  train::StepSpec fused = spec;
  fused.update_in_backward = true;
  train::StepSpec after = spec;
  after.update_in_backward = false;
  const Trained a = train_steps(after, steps), b = train_steps(fused, steps);
  const std::string what = spec.model + " " + spec.optimizer.kind + " recompute " + spec.recompute;
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t s = 0; s < a.losses.size(); ++s) {
    ASSERT_TRUE(std::isfinite(b.losses[s])) << what << " step " << s;
    EXPECT_EQ(std::memcmp(&a.losses[s], &b.losses[s], 4), 0) << what << " step " << s << ": " << a.losses[s]
                                                             << " vs " << b.losses[s];
  }
  ASSERT_EQ(a.state.size(), b.state.size()) << what;
  for (const auto& [name, w] : a.state) {
    const auto it = b.state.find(name);
    ASSERT_NE(it, b.state.end()) << what << ": " << name;
    EXPECT_EQ(std::memcmp(w.data(), it->second.data(), w.size() * 4), 0) << what << ": '" << name << "' differs";
  }
  // The updates ran: the optimizer state moved from its zeros.
  bool moved = false;
  for (const auto& [name, w] : b.state)
    if (name.find(".momentum") != std::string::npos || name.find(".exp_avg") != std::string::npos)
      for (float e : w) moved = moved || e != 0.0f;
  EXPECT_TRUE(moved) << what;
}

}  // namespace

TEST(UpdateInBackward, OneUpdatePerParameterRightAfterItsGradientAndLastRead) {
  const auto plain = train::build_step_graph(with_optimizer(gpt_tiny("adamw", false), "adamw"));
  const auto sg = train::build_step_graph(with_optimizer(gpt_tiny("adamw", true), "adamw"));
  const Graph& g = sg->g;
  const Node& whole = plain->g.node(static_cast<NodeId>(plain->g.num_nodes() - 1));
  const int64_t n = whole.attrs.i("count");
  EXPECT_EQ(sg->updates_in_backward, n);
  EXPECT_EQ(g.num_nodes(), plain->g.num_nodes() + static_cast<size_t>(n) - 1);
  std::map<std::string, int64_t> decay_of;  // the whole update's decay groups, by parameter
  for (int64_t i = 0; i < n; ++i)
    decay_of[plain->g.value(whole.inputs[static_cast<size_t>(i)]).name] = whole.attrs.ints("decay")[static_cast<size_t>(i)];

  // Readers and writers of every value, with views of parameters followed.
  std::vector<NodeId> producer_pos(g.num_values(), -1);
  std::map<ValueId, std::vector<NodeId>> param_readers;
  std::map<ValueId, ValueId> view_root;
  std::set<NodeId> movable;
  for (size_t k = 0; k < g.num_nodes(); ++k) {
    const Node& nd = g.node(static_cast<NodeId>(k));
    if (nd.phase == Phase::Update) {
      movable.insert(static_cast<NodeId>(k));
      continue;
    }
    for (ValueId v : nd.inputs) {
      const ValueId root = view_root.count(v) ? view_root[v] : v;
      if (g.value(root).cls == VClass::Param) param_readers[root].push_back(static_cast<NodeId>(k));
    }
    const int view = op_def(nd.op).traits.view_of_input;
    if (view >= 0) {
      const ValueId in = nd.inputs[static_cast<size_t>(view)];
      const ValueId root = view_root.count(in) ? view_root[in] : in;
      if (g.value(root).cls == VClass::Param) view_root[nd.outputs[0]] = root;
    }
  }
  int updates = 0;
  std::set<std::string> seen;
  for (size_t k = 0; k < g.num_nodes(); ++k) {
    const Node& u = g.node(static_cast<NodeId>(k));
    if (u.phase != Phase::Update) continue;
    ++updates;
    ASSERT_EQ(u.op, "adam_update");
    ASSERT_EQ(u.inputs.size(), 4u);
    ASSERT_EQ(u.attrs.i("count"), 1);
    const Value& p = g.value(u.inputs[0]);
    seen.insert(p.name);
    EXPECT_EQ(u.inputs[1], p.grad) << p.name;
    EXPECT_EQ(g.value(u.inputs[2]).name, p.name + ".exp_avg");
    EXPECT_EQ(g.value(u.inputs[3]).name, p.name + ".exp_avg_sq");
    EXPECT_EQ(u.attrs.ints("decay"), std::vector<int64_t>{decay_of.at(p.name)}) << p.name;
    EXPECT_EQ(g.value(p.grad).cls, VClass::Transient) << p.name;
    // After the gradient's producer and every other reader of the parameter ...
    size_t after = static_cast<size_t>(g.value(p.grad).producer);
    for (NodeId r : param_readers[u.inputs[0]]) after = std::max(after, static_cast<size_t>(r));
    ASSERT_LT(after, k) << p.name;
    // ... and as early as that: only other updates (or gradient sums) in between.
    for (size_t j = after + 1; j < k; ++j) {
      const Node& mid = g.node(static_cast<NodeId>(j));
      EXPECT_TRUE(mid.phase == Phase::Update || mid.op == "add" || mid.op == "scale")
          << p.name << "'s update waits behind " << describe(g, mid);
    }
  }
  EXPECT_EQ(updates, n);
  EXPECT_EQ(seen.size(), static_cast<size_t>(n));
  // The tied token table: read by the embedding and the head, its gradient
  // the head's contribution (first in backward) with the embedding's rows
  // added into it (last): its update is the last node of the step.
  const ValueId wte = g.find("transformer.wte.weight");
  const NodeId sum = g.value(g.value(wte).grad).producer;
  EXPECT_EQ(g.node(sum).op, "embedding_bwd");
  ASSERT_EQ(g.node(sum).inputs.size(), 3u);
  EXPECT_EQ(g.node(g.value(g.node(sum).inputs[2]).producer).phase, Phase::Backward);
  const Node& last = g.node(static_cast<NodeId>(g.num_nodes() - 1));
  EXPECT_EQ(last.inputs[0], wte);
  // A position table's update runs long before the end: the embedding's
  // backward comes last, the updates of the last block's weights first.
  const Node& first = *std::find_if(g.nodes().begin(), g.nodes().end(), [](const Node& nd) { return nd.phase == Phase::Update; });
  EXPECT_NE(g.value(first.inputs[0]).name.find("ln_f"), std::string::npos) << g.value(first.inputs[0]).name;
}

// Any number of state groups and per-tensor attributes: a third input group
// and an attribute of length count are sliced too, the rest kept.
TEST(UpdateInBackward, SlicesEveryStateGroupAndPerTensorAttribute) {
  Graph g;
  Builder b(g);
  const ValueId x = g.input("x", {4, 6}), y = g.input("y", {4}, DType::i32);
  const ValueId h = relu(b, linear(b, x, 5, {.name = "fc1"}));
  const ValueId loss = softmax_xent(b, linear(b, h, 3, {.name = "fc2"}), y);
  build_backward(g, loss);
  append_optimizer(g, {.kind = "sgd", .momentum = 0.9});
  Node& whole = g.node(static_cast<NodeId>(g.num_nodes() - 1));
  const int64_t n = whole.attrs.i("count");
  ASSERT_EQ(n, 4);  // fc1 and fc2, weight and bias
  std::vector<ValueId> params(whole.inputs.begin(), whole.inputs.begin() + n);
  for (ValueId p : params) {  // a second state group, as a compact format's scales would be
    Value v;
    v.name = g.value(p).name + ".scale";
    v.shape = {1};
    v.cls = VClass::OptState;
    g.node(static_cast<NodeId>(g.num_nodes() - 1)).inputs.push_back(g.add_value(v));
  }
  Node& u = g.node(static_cast<NodeId>(g.num_nodes() - 1));
  u.attrs.set("states", int64_t(2)).set("codes", std::vector<int64_t>{10, 11, 12, 13}).set("pair", std::vector<int64_t>{7, 8});
  EXPECT_EQ(update_in_backward(g), 4);
  int found = 0;
  for (const Node& nd : g.nodes()) {
    if (nd.phase != Phase::Update) continue;
    const size_t i = static_cast<size_t>(std::find(params.begin(), params.end(), nd.inputs[0]) - params.begin());
    ASSERT_LT(i, params.size());
    ++found;
    ASSERT_EQ(nd.inputs.size(), 4u);
    EXPECT_EQ(nd.inputs[1], g.value(params[i]).grad);
    EXPECT_EQ(g.value(nd.inputs[2]).name, g.value(params[i]).name + ".momentum");
    EXPECT_EQ(g.value(nd.inputs[3]).name, g.value(params[i]).name + ".scale");
    EXPECT_EQ(nd.attrs.i("count"), 1);
    EXPECT_EQ(nd.attrs.i("states"), 2);
    EXPECT_EQ(nd.attrs.ints("codes"), std::vector<int64_t>{10 + static_cast<int64_t>(i)});
    EXPECT_EQ(nd.attrs.ints("decay"), std::vector<int64_t>{1});
    EXPECT_EQ(nd.attrs.ints("pair"), (std::vector<int64_t>{7, 8}));
    EXPECT_EQ(nd.attrs.f("momentum"), 0.9);
  }
  EXPECT_EQ(found, 4);
}

TEST(UpdateInBackward, RefusesWhatNeedsEveryGradientFirst) {
  train::StepSpec acc = convnet(true);
  acc.accumulation = 2;
  try {
    train::build_step_graph(acc);
    ADD_FAILURE() << "accumulation accepted";
  } catch (const GraphError& e) {
    EXPECT_NE(std::string(e.what()).find("drop --accumulate or --update-in-backward"), std::string::npos) << e.what();
  }
  train::StepSpec clip = convnet(true);
  clip.optimizer.clip_grad_norm = 1.0;
  try {
    train::build_step_graph(clip);
    ADD_FAILURE() << "clipping accepted";
  } catch (const GraphError& e) {
    EXPECT_NE(std::string(e.what()).find("drop --clip-grad-norm or --update-in-backward"), std::string::npos) << e.what();
  }
}

// A parameter read after its gradient is complete (here fc2's weight
// gradient scheduled before the backward that reads the weight for fc1's
// input gradient): its update waits for that reader, and training stays
// bit-identical. Updating right after the gradient would change the input
// gradient.
TEST(UpdateInBackward, WaitsForTheLastReaderOfTheParameter) {
  struct Net {
    Graph g;
    ValueId x = kNone, y = kNone, loss = kNone, w2 = kNone;
  };
  auto make = [](bool uib) {
    auto net = std::make_unique<Net>();
    Graph& g = net->g;
    Builder b(g);
    net->x = g.input("x", {8, 6});
    net->y = g.input("y", {8}, DType::i32);
    const ValueId h = relu(b, linear(b, net->x, 16, {.name = "fc1"}));
    net->loss = softmax_xent(b, linear(b, h, 4, {.name = "fc2"}), net->y);
    build_backward(g, net->loss);
    net->w2 = g.find("fc2.weight");
    NodeId data = -1, weight = -1;
    for (size_t k = 0; k < g.num_nodes(); ++k) {
      const Node& n = g.node(static_cast<NodeId>(k));
      if (n.op == "linear_bwd_data" && n.inputs[1] == net->w2) data = static_cast<NodeId>(k);
      if (n.op == "linear_bwd_weight" && n.outputs[0] == g.value(net->w2).grad) weight = static_cast<NodeId>(k);
    }
    EXPECT_TRUE(data >= 0 && data < weight);
    std::vector<NodeId> order;
    for (size_t k = 0; k < g.num_nodes(); ++k) {
      if (static_cast<NodeId>(k) == weight) continue;
      if (static_cast<NodeId>(k) == data) order.push_back(weight);
      order.push_back(static_cast<NodeId>(k));
    }
    g.reorder(order);
    append_optimizer(g, {.kind = "sgd", .momentum = 0.9});
    if (uib) update_in_backward(g);
    return net;
  };
  auto train = [](Net& net) {
    Executor ex(net.g, ExecConfig{});
    ex.init_params(2);
    ex.poison(0xFF);
    for (int64_t i = 0; i < 48; ++i) ex.ptr<float>(net.x)[i] = static_cast<float>((i * 37) % 11) / 11.0f - 0.5f;
    for (int64_t i = 0; i < 8; ++i) ex.ptr<int32_t>(net.y)[i] = static_cast<int32_t>(i % 4);
    kernels::StepContext ctx;
    ctx.lr = 0.1;
    std::vector<float> w;
    for (int step = 0; step < 5; ++step) {
      ctx.step = step;
      ex.run(ctx);
    }
    for (ValueId p : net.g.params()) {
      const float* d = ex.ptr<float>(p);
      w.insert(w.end(), d, d + numel(net.g.value(p).shape));
    }
    return w;
  };
  const auto after = make(false), fused = make(true);
  const Graph& g = fused->g;
  size_t reader = 0, update = 0;
  for (size_t k = 0; k < g.num_nodes(); ++k) {
    const Node& n = g.node(static_cast<NodeId>(k));
    if (n.op == "linear_bwd_data" && n.inputs[1] == fused->w2) reader = k;
    if (n.phase == Phase::Update && n.inputs[0] == fused->w2) update = k;
  }
  EXPECT_EQ(update, reader + 1) << "fc2.weight's update does not follow the last node that reads it";
  const std::vector<float> a = train(*after), b = train(*fused);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
}

// Weights, buffers and optimizer state after 20 steps are bit-identical to
// the update after backward.
TEST(UpdateInBackward, ConvNetSgdMomentumBitIdentical) { expect_bit_identical(with_optimizer(convnet(false), "sgd"), 20); }
TEST(UpdateInBackward, ConvNetAdamWDecayGroupsBitIdentical) {
  expect_bit_identical(with_optimizer(convnet(false), "adamw"), 20);
}
TEST(UpdateInBackward, GptTinySgdMomentumBitIdentical) { expect_bit_identical(with_optimizer(gpt_tiny("sgd", false), "sgd"), 20); }
TEST(UpdateInBackward, GptTinyAdamWDecayGroupsBitIdentical) {
  expect_bit_identical(with_optimizer(gpt_tiny("adamw", false), "adamw"), 20);
}
// bf16 activations: the updates read the same f32 gradients.
TEST(UpdateInBackward, ConvNetBf16BitIdentical) {
  train::StepSpec s = with_optimizer(convnet(false), "sgd");
  s.precision = DType::bf16;
  expect_bit_identical(s, 10);
}
// Recomputed forward nodes read weights late in backward: their updates wait.
TEST(UpdateInBackward, GptTinyWithRecomputationBitIdentical) {
  for (const char* policy : {"cheap", "segments"}) {
    train::StepSpec s = with_optimizer(gpt_tiny("adamw", false), "adamw");
    s.recompute = policy;
    expect_bit_identical(s, 20);
  }
}

// The plan: no gradients arena; gradients in the activations arena, the
// most of them live at once less than all of them and within the arena's
// live peak; the whole plan smaller; every buffer checked (verify_plan).
// (test_plan_accuracy measures such a plan against the process's peak.)
TEST(UpdateInBackward, PlanKeepsOnlyTheLiveGradients) {
  for (const char* model : {"gpt-char", "convnet"}) {
    train::StepSpec s = model == std::string("convnet") ? convnet(false) : gpt_tiny("adamw", false);
    s.model = model;
    if (s.model == "gpt-char") s.batch = 4;
    ExecConfig cfg;
    cfg.verify = true;
    const auto a = train::build_step_graph(s);
    s.update_in_backward = true;
    const auto b = train::build_step_graph(s);
    const Plan pa = plan_for(a->g, cfg), pb = plan_for(b->g, cfg);
    const size_t grads = pa.arena_bytes[static_cast<size_t>(Arena::Grads)];
    EXPECT_GT(grads, 0u);
    EXPECT_EQ(pb.arena_bytes[static_cast<size_t>(Arena::Grads)], 0u) << model;
    // The most gradient bytes live at once, from the plan's lifetimes.
    std::vector<size_t> live(b->g.num_nodes() + 1, 0);
    size_t all = 0;
    for (size_t v = 0; v < b->g.num_values(); ++v) {
      if (!is_param_grad(b->g, static_cast<ValueId>(v))) continue;
      const Placement& pl = pb.values[v];
      EXPECT_EQ(pl.arena, Arena::Transient);
      all += pl.bytes;
      for (int32_t t = pl.first; t <= pl.last; ++t) live[static_cast<size_t>(t)] += pl.bytes;
    }
    const size_t most = *std::max_element(live.begin(), live.end());
    EXPECT_LT(most, all) << model;
    EXPECT_LE(most, pb.peak_live_bytes) << model;
    EXPECT_LE(pb.peak_live_bytes, pb.arena_bytes[0]) << model;
    EXPECT_LT(pb.total_bytes(), pa.total_bytes()) << model;
    std::printf("%s: gradients %.2f MiB -> %.2f MiB live at most; plan %.2f -> %.2f MiB\n", model, grads / 1048576.0,
                most / 1048576.0, pa.total_bytes() / 1048576.0, pb.total_bytes() / 1048576.0);
  }
}

// The plan text names the policy and what it saves, and the table says
// where the gradients went.
TEST(UpdateInBackward, PlanTextShowsThePolicyAndItsEffect) {
  const auto r = memfit::testing::run_memfit("plan --model resnet18 --batch 8 --update-in-backward --memory 1TiB --threads 2");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* s : {"update in backward: gradients 42.6 MiB -> ", " live at most (62 update nodes)",
                        "in the activations arena (update in backward): at most ", "    gradients "})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
}
