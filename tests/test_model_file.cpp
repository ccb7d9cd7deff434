// Model files: the shipped ConvNet and ResNet-18 files build the same graph
// as the zoo; syntax and shape errors name the file and line.
#include <gtest/gtest.h>

#include "memfit/builder.hpp"
#include "models/model_file.hpp"
#include "models/zoo.hpp"
#include "model_text.hpp"

using namespace memfit;

namespace {

void expect_same_graph(const std::string& zoo_name, const std::string& file) {
  Graph a, b;
  Builder ba(a), bb(b);
  ValueId xa = a.input("input", {2, 1, 28, 28}), xb = b.input("input", {2, 1, 28, 28});
  ValueId ya = models::resolve_model(zoo_name)(ba, xa, 10);
  ValueId yb = models::load_model_file(std::string(MEMFIT_TEST_DATA) + "/../models/files/" + file)(bb, xb, 10);
  ASSERT_EQ(a.num_nodes(), b.num_nodes());
  ASSERT_EQ(a.num_values(), b.num_values());
  for (size_t i = 0; i < a.num_nodes(); ++i) {
    const Node& na = a.node(static_cast<NodeId>(i));
    const Node& nb = b.node(static_cast<NodeId>(i));
    EXPECT_EQ(na.op, nb.op) << i;
    EXPECT_EQ(na.inputs, nb.inputs) << i << " " << na.layer;
    EXPECT_EQ(na.layer, nb.layer) << i;
  }
  for (size_t v = 0; v < a.num_values(); ++v) {
    EXPECT_EQ(a.value(static_cast<ValueId>(v)).name, b.value(static_cast<ValueId>(v)).name);
    EXPECT_EQ(a.value(static_cast<ValueId>(v)).shape, b.value(static_cast<ValueId>(v)).shape);
  }
  EXPECT_EQ(a.value(ya).shape, b.value(yb).shape);
}

}  // namespace

TEST(ModelFile, ConvNetMatchesZoo) { expect_same_graph("convnet", "convnet.mf"); }
TEST(ModelFile, ResNet18MatchesZoo) { expect_same_graph("resnet18", "resnet18.mf"); }

TEST(ModelFile, ErrorsNameTheLine) {
  EXPECT_EQ(memfit::testing::model_text_error("conv c1 out=8 k=3\nfrobnicate\n").rfind("m.mf:2: unknown layer 'frobnicate'", 0), 0u);
  EXPECT_EQ(memfit::testing::model_text_error("conv c1 out=8\n").rfind("m.mf:1: conv needs k=", 0), 0u);
  EXPECT_EQ(memfit::testing::model_text_error("conv c1 out=eight k=3\n").rfind("m.mf:1: out= expects an integer", 0), 0u);
  EXPECT_EQ(memfit::testing::model_text_error("conv c1 out=8 k=3 colour=red\n").rfind("m.mf:1: conv has no option 'colour'", 0), 0u);
  EXPECT_EQ(memfit::testing::model_text_error("relu\nadd skip\n").rfind("m.mf:2: no value is labelled 'skip'", 0), 0u);
  EXPECT_EQ(memfit::testing::model_text_error("scope a\nrelu\n").rfind("m.mf: a 'scope' is not closed", 0), 0u);
  // A shape error from the builder is reported at the offending line with the shapes.
  std::string e = memfit::testing::model_text_error("conv c1 out=8 k=3\nflatten\nlinear fc out=10\nsave a\nload a\nconv c2 out=4 k=3\n");
  EXPECT_EQ(e.rfind("m.mf:6:", 0), 0u) << e;
  EXPECT_NE(e.find("[2, 10]"), std::string::npos) << e;
}

TEST(ModelFile, ResidualAddShapeMismatch) {
  std::string e = memfit::testing::model_text_error("save in\nconv c1 out=8 k=3 pad=1\nadd in\n");
  EXPECT_EQ(e.rfind("m.mf:3:", 0), 0u) << e;
  EXPECT_NE(e.find("[2, 8, 28, 28]"), std::string::npos) << e;
  EXPECT_NE(e.find("[2, 1, 28, 28]"), std::string::npos) << e;
}
