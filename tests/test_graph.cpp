// Graph IR: shape inference rejects bad models with a message naming the
// layer and both shapes; autodiff gives gradients only where they are needed.
#include <gtest/gtest.h>

#include "memfit/autodiff.hpp"
#include "memfit/builder.hpp"
#include "models/zoo.hpp"

using namespace memfit;

TEST(Graph, MismatchedLinearNamesLayerAndShapes) {
  Graph g;
  Builder b(g);
  ValueId x = g.input("x", {8, 100});
  x = linear(b, x, 50, {.name = "fc1"});
  try {
    ValueId w = g.param("fc2.weight", {10, 60});
    g.add1("linear", {x, w}, {}, "fc2");
    FAIL() << "expected GraphError";
  } catch (const GraphError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("fc2"), std::string::npos) << m;
    EXPECT_NE(m.find("[8, 50]"), std::string::npos) << m;
    EXPECT_NE(m.find("[10, 60]"), std::string::npos) << m;
  }
}

TEST(Graph, MismatchedConvChannels) {
  Graph g;
  Builder b(g);
  ValueId x = g.input("x", {2, 3, 8, 8});
  x = conv2d(b, x, 4, 3, {.name = "c1"});
  ValueId w = g.param("c2.weight", {4, 5, 3, 3});
  try {
    g.add1("conv2d", {x, w}, {{"stride", Shape{1, 1}}, {"pad", Shape{0, 0}}, {"dilation", Shape{1, 1}}, {"groups", int64_t(1)}}, "c2");
    FAIL() << "expected GraphError";
  } catch (const GraphError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("c2"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 4, 6, 6]"), std::string::npos) << m;
    EXPECT_NE(m.find("[4, 5, 3, 3]"), std::string::npos) << m;
  }
}

TEST(Graph, AddShapeMismatch) {
  Graph g;
  Builder b(g);
  ValueId a = g.input("a", {2, 3});
  ValueId c = g.input("c", {3, 2});
  EXPECT_THROW(add(b, a, c), GraphError);
}

TEST(Graph, ConvNetParamNamesFollowPyTorch) {
  Graph g;
  Builder b(g);
  ValueId x = g.input("input", {4, 1, 28, 28});
  ValueId y = models::convnet(b, x, 10);
  EXPECT_EQ(g.value(y).shape, (Shape{4, 10}));
  std::vector<std::string> names;
  for (ValueId p : g.params()) names.push_back(g.value(p).name);
  EXPECT_EQ(names, (std::vector<std::string>{"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight",
                                             "fc1.bias", "fc2.weight", "fc2.bias"}));
}

TEST(Graph, ResNet18Shapes) {
  Graph g;
  Builder b(g);
  ValueId x = g.input("input", {2, 1, 28, 28});
  ValueId y = models::resnet18(b, x, 10);
  EXPECT_EQ(g.value(y).shape, (Shape{2, 10}));
  int64_t n = 0;
  for (ValueId p : g.params()) n += numel(g.value(p).shape);
  // 11,173,962 for the 3-channel CIFAR ResNet-18 with 10 classes; the stem here
  // has 1 input channel: 64*3*3*2 = 1,152 fewer (PyTorch counts 11,172,810).
  EXPECT_EQ(n, 11173962 - 1152);
  EXPECT_NE(g.find("layer2.0.downsample.0.weight"), kNone);
  EXPECT_NE(g.find("layer4.1.bn2.running_var"), kNone);
  EXPECT_EQ(g.find("layer1.0.downsample.0.weight"), kNone);
}

TEST(Autodiff, FrozenParamsAndInputsGetNoGradient) {
  Graph g;
  Builder b(g);
  ValueId x = g.input("x", {4, 8});
  ValueId lab = g.input("labels", {4}, DType::i32);
  ValueId h = linear(b, x, 16, {.name = "fc1"});
  g.value(g.find("fc1.weight")).trainable = false;
  g.value(g.find("fc1.bias")).trainable = false;
  h = relu(b, h);
  ValueId y = linear(b, h, 3, {.name = "fc2"});
  ValueId loss = softmax_xent(b, y, lab);
  BackwardResult r = build_backward(g, loss);
  EXPECT_EQ(g.value(x).grad, kNone);
  EXPECT_EQ(g.value(g.find("fc1.weight")).grad, kNone);
  EXPECT_NE(g.value(g.find("fc2.weight")).grad, kNone);
  // Nothing computes a gradient for fc1's input or its parameters.
  int bwd_weight = 0, bwd_data = 0, relu_bwd = 0;
  for (const Node& n : g.nodes()) {
    bwd_weight += n.op == "linear_bwd_weight";
    bwd_data += n.op == "linear_bwd_data";
    relu_bwd += n.op == "relu_bwd";
    if (n.op == "linear_bwd_weight") {
      EXPECT_EQ(n.layer, "fc2");
    }
  }
  EXPECT_EQ(bwd_weight, 1);
  EXPECT_EQ(bwd_data, 0);
  EXPECT_EQ(relu_bwd, 0);
}
