// Gradient checks for element-wise ops and linear (see gradcheck.hpp).
#include "gradcheck.hpp"

using namespace memfit;
using memfit::testing::grad_check;
using memfit::testing::GradCheckOptions;

TEST(GradCheck, Linear) {
  grad_check({{{5, 7}}}, [](Builder& b, const std::vector<ValueId>& in) { return linear(b, in[0], 3); });
}

TEST(GradCheck, LinearNoBias3d) {
  grad_check({{{2, 3, 4}}}, [](Builder& b, const std::vector<ValueId>& in) {
    return linear(b, in[0], 6, {.bias = false});
  });
}

TEST(GradCheck, ReluAddFanOut) {
  GradCheckOptions o;
  o.margin = 1e-3;
  // x feeds two consumers: autodiff must sum both contributions.
  grad_check({{{4, 6}}, {{4, 6}}},
             [](Builder& b, const std::vector<ValueId>& in) {
               ValueId r = relu(b, in[0]);
               ValueId s = add(b, r, in[1]);
               return add(b, s, in[0]);
             },
             o);
}

TEST(GradCheck, ReshapeScale) {
  grad_check({{{3, 4}}}, [](Builder& b, const std::vector<ValueId>& in) {
    ValueId r = reshape(b, in[0], {2, 6});
    return b.g.add1("scale", {r}, {{"alpha", 2.5}}, "scale");
  });
}
