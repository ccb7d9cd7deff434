// The op registry is the one place that knows an op: every registered op
// says how gradients pass it, has a reference kernel (the oracle), and has a
// fast CPU kernel unless its traits say the reference one serves the CPU
// (data movement). A new op family that forgets a piece fails here, not by
// silently running the slow reference kernel or losing a gradient.
// Autodiff refuses a path through an op without a gradient rule.
#include <gtest/gtest.h>

#include <string>

#include "memfit/autodiff.hpp"
#include "memfit/graph.hpp"
#include "memfit/op_registry.hpp"
#include "runtime/kernel_table.hpp"

using namespace memfit;

TEST(OpRegistry, EveryOpIsComplete) {
  const auto ops = registered_ops();
  ASSERT_GT(ops.size(), 30u);
  for (const std::string& op : ops) {
    const OpDef& d = op_def(op);
    EXPECT_TRUE(static_cast<bool>(d.grad) != d.traits.no_gradient)
        << op << ": a gradient rule, or no_gradient, exactly one of them";
    EXPECT_TRUE(static_cast<bool>(d.infer)) << op << " has no shape inference";
    const bool view = d.traits.view_of_input >= 0;
    if (view) continue;  // a view runs no kernel
    EXPECT_TRUE(has_reference_kernel(op)) << op << " has no reference kernel";
    if (!d.traits.reference_serves_cpu) {
      EXPECT_TRUE(has_cpu_kernel(op)) << op << " has no fast CPU kernel (or mark reference_serves_cpu)";
    } else {
      EXPECT_FALSE(has_cpu_kernel(op)) << op << " has a CPU kernel but says the reference one serves";
    }
    // Blocked layouts are the fast kernels' (cast's one lowering is
    // element-wise and takes any layout).
    if (const OperandLayouts* l = kernel_table("cpu").layouts(op)) {
      for (size_t i : l->ins) EXPECT_LT(i, 8u) << op;
      if (!d.traits.reference_serves_cpu) EXPECT_TRUE(has_cpu_kernel(op)) << op << ": blocked layouts need a CPU kernel";
    }
  }
}

TEST(OpRegistry, RegisteringAnOpWithoutGradientIntentIsRefused) {
  OpDef d;
  d.name = "test_op_without_gradient_intent";
  d.infer = [](const Graph& g, const Node& n) { return std::vector<ValueMeta>{{g.value(n.inputs[0]).shape, DType::f32}}; };
  EXPECT_THROW(register_op(d), GraphError);
}

// A no-gradient op between a parameter and the loss: autodiff names it.
TEST(OpRegistry, AutodiffRefusesAPathWithoutAGradientRule) {
  Graph g;
  const ValueId w = g.param("w", {4, 4});
  const ValueId y = g.add1("relu_bwd", {w, w}, {}, "odd", Phase::Forward);  // no gradient rule
  const ValueId labels = g.input("labels", {4}, DType::i32);
  const auto outs = g.add_node("softmax_xent", {y, labels}, {}, "loss", Phase::Forward);
  try {
    build_backward(g, outs[0], {});
    FAIL() << "autodiff passed through an op without a gradient rule";
  } catch (const GraphError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("layer 'odd' (relu_bwd)"), std::string::npos) << m;
    EXPECT_NE(m.find("no gradient rule"), std::string::npos) << m;
  }
}

// The passes that once matched op names read these traits instead; the ops
// the passes are written for must declare them (a family that moved or
// renamed one would otherwise silently lose the fold, the report row or the
// sharded reduction).
TEST(OpRegistry, ThePassesFindTheirOpsByTrait) {
  for (const char* op : {"reshape", "slice", "permute"}) EXPECT_TRUE(op_def(op).traits.rearranges_input) << op;
  EXPECT_FALSE(op_def("concat").traits.rearranges_input) << "concat mixes several inputs";
  EXPECT_EQ(op_def("embedding_bwd").traits.accumulator_input, 2);
  for (const char* op : {"sgd_update", "adam_update", "adafactor_update"}) EXPECT_TRUE(op_def(op).traits.updates_parameters) << op;
  EXPECT_TRUE(op_def("grad_accumulate").traits.accumulates_gradients);
  EXPECT_TRUE(op_def("grad_reduce").traits.reduces_across_ranks);
  // Each trait marks only ops without a gradient of their own where it
  // describes a backward or update step.
  for (const std::string& op : registered_ops()) {
    const OpTraits& t = op_def(op).traits;
    if (t.updates_parameters || t.accumulates_gradients || t.reduces_across_ranks || t.accumulator_input >= 0)
      EXPECT_TRUE(t.no_gradient) << op;
  }
}
