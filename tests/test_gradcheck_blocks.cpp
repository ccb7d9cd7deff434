// Gradient checks of whole blocks (residual, batch norm, fan-out) in double:
// catches autodiff wiring and planner aliasing that single-op checks miss.
#include "gradcheck.hpp"

using namespace memfit;
using memfit::testing::grad_check;
using memfit::testing::GradCheckOptions;

namespace {
ValueId block(Builder& b, ValueId x, int64_t ch, int64_t stride) {
  const int64_t in_ch = b.g.value(x).shape[1];
  ValueId y = conv2d(b, x, ch, 3, {.stride = stride, .pad = 1, .bias = false, .name = "conv1"});
  y = batch_norm(b, y, {.name = "bn1"});
  y = relu(b, y);
  y = conv2d(b, y, ch, 3, {.pad = 1, .bias = false, .name = "conv2"});
  y = batch_norm(b, y, {.name = "bn2"});
  ValueId s = x;
  if (stride != 1 || in_ch != ch) {
    auto sc = b.scope("downsample");
    s = conv2d(b, x, ch, 1, {.stride = stride, .bias = false, .name = "0"});
    s = batch_norm(b, s, {.name = "1"});
  }
  return relu(b, add(b, y, s));
}
}  // namespace

TEST(GradCheckBlocks, TwoResidualBlocks) {
  GradCheckOptions o;
  o.max_checks_per_tensor = 12;
  grad_check({{{2, 3, 6, 6}}}, [](Builder& b, const std::vector<ValueId>& in) {
    ValueId x;
    {
      auto s = b.scope("a");
      x = block(b, in[0], 4, 2);
    }
    auto s = b.scope("b");
    return block(b, x, 4, 1);
  }, o);
}
