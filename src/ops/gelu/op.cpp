// gelu(x), element-wise, any shape (Transformers' feed-forward activation).
// Attr approximate: "none" (default; the exact x Phi(x) with erf, BERT) or
// "tanh" (GPT-2's tanh approximation), as torch.nn.functional.gelu names it.
// The backward gelu_bwd(x, dy) reads the input, not the output.
#include "ops/common/op_last_axis.hpp"

namespace memfit {
namespace {

// Checks attr approximate (absent means "none").
void check_approximate(const Graph& g, const Node& n) {
  if (!n.attrs.has("approximate")) return;
  const std::string& a = n.attrs.s("approximate");
  if (a != "none" && a != "tanh") shape_fail(g, n, "approximate must be \"none\" or \"tanh\", got \"" + a + "\"");
}

void check_float(const Graph& g, const Node& n) {
  if (!is_float(in_dtype(g, n, 0))) shape_fail(g, n, "gelu needs a float input");
}

}  // namespace

void register_gelu_ops() {
  OpDef gelu = simple_op("gelu", 0);  // y may overwrite x where x dies here (inference)
  gelu.traits.no_gradient = false;
  gelu.traits.rebuild = true;  // its backward keeps x: y is one pass over it
  gelu.infer = [](const Graph& g, const Node& n) {
    if (n.inputs.size() != 1) shape_fail(g, n, "gelu takes one input");
    check_float(g, n);
    check_approximate(g, n);
    return same_as(g, n, 0);
  };
  gelu.grad = [](GradContext& c) {
    std::vector<ValueId> r{kNone};
    if (c.out_grads[0] != kNone && c.need[0]) r[0] = c.emit1("gelu_bwd", {c.in(0), c.out_grads[0]}, c.fwd().attrs);
    return r;
  };
  // The fast kernel's arithmetic: a cubic or a scaling, then exp (tanh) or
  // erfc (an exp and a degree-9 polynomial), counted as multiply-adds.
  gelu.flops = [](const Graph& g, const Node& n) { return 30.0 * static_cast<double>(numel(in_shape(g, n, 0))); };
  register_op(gelu);

  // gelu_bwd(x, dy) -> dx = dy gelu'(x); dx may overwrite dy.
  OpDef bwd = simple_op("gelu_bwd", 1);
  bwd.infer = [](const Graph& g, const Node& n) {
    if (n.inputs.size() != 2) shape_fail(g, n, "gelu_bwd takes x, dy");
    check_float(g, n);
    check_approximate(g, n);
    expect_like(g, n, 1, 0, "dy must have x's");
    return same_as(g, n, 1);
  };
  bwd.flops = [](const Graph& g, const Node& n) { return 40.0 * static_cast<double>(numel(in_shape(g, n, 0))); };
  register_op(bwd);
}

}  // namespace memfit
