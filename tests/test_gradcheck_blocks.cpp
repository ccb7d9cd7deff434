// Gradient checks of whole blocks (residual, batch norm, fan-out) in double:
// catches autodiff wiring and planner aliasing that single-op checks miss.
#include "gradcheck.hpp"
#include "models/zoo.hpp"

using namespace memfit;
using memfit::testing::grad_check;
using memfit::testing::GradCheckOptions;

using models::basic_block;

TEST(GradCheckBlocks, TwoResidualBlocks) {
  GradCheckOptions o;
  o.max_checks_per_tensor = 12;
  grad_check({{{2, 3, 6, 6}}}, [](Builder& b, const std::vector<ValueId>& in) {
    ValueId x;
    {
      auto s = b.scope("a");
      x = basic_block(b, in[0], 4, 2);
    }
    auto s = b.scope("b");
    return basic_block(b, x, 4, 1);
  }, o);
}
