// activation(x): a pointwise activation, any shape and float type; attr kind
// names it (ops/activation/params.hpp gives each formula and derivative):
//   sigmoid, tanh, silu, hardswish, exp, sqrt    no parameters
//   clip          min, max (ReLU6 is clip 0..6)
//   hardsigmoid   alpha (default 1/6), beta (default 1/2), as PyTorch's
//   leaky_relu    alpha (default 0.01)
//   elu           alpha (default 1)
// The backward activation_bwd(x, dy) reads the input, like gelu's.
#include <cmath>

#include "ops/common/op_last_axis.hpp"

namespace memfit {
namespace {

const char* const kKinds[] = {"sigmoid", "tanh",       "silu", "clip", "hardsigmoid",
                              "hardswish", "leaky_relu", "elu",  "exp",  "sqrt"};

// Checks attr kind and the parameters it needs.
void check_kind(const Graph& g, const Node& n) {
  if (!n.attrs.has("kind")) shape_fail(g, n, "activation needs attr kind");
  const std::string& k = n.attrs.s("kind");
  bool known = false;
  std::string list;
  for (const char* name : kKinds) {
    known = known || k == name;
    list += std::string(list.empty() ? "" : ", ") + name;
  }
  if (!known) shape_fail(g, n, "unknown activation kind \"" + k + "\" (known: " + list + ")");
  if (k == "clip") {
    if (!n.attrs.has("min") || !n.attrs.has("max")) shape_fail(g, n, "clip needs attrs min and max");
    const double lo = n.attrs.f("min"), hi = n.attrs.f("max");
    if (!(lo <= hi)) shape_fail(g, n, "clip needs min <= max, got " + std::to_string(lo) + " and " + std::to_string(hi));
  }
  for (const char* a : {"alpha", "beta"})
    if (n.attrs.has(a) && !std::isfinite(n.attrs.f(a))) shape_fail(g, n, std::string(a) + " must be finite");
}

void check_float(const Graph& g, const Node& n) {
  if (!is_float(in_dtype(g, n, 0))) shape_fail(g, n, n.op + " needs a float input");
}

}  // namespace

void register_activation_ops() {
  OpDef act = simple_op("activation", 0);  // y may overwrite x where x dies here (inference)
  act.traits.no_gradient = false;
  act.traits.rebuild = true;  // its backward keeps x: y is one pass over it
  act.infer = [](const Graph& g, const Node& n) {
    if (n.inputs.size() != 1) shape_fail(g, n, "activation takes one input");
    check_float(g, n);
    check_kind(g, n);
    return same_as(g, n, 0);
  };
  act.grad = [](GradContext& c) {
    std::vector<ValueId> r{kNone};
    if (c.out_grads[0] != kNone && c.need[0])
      r[0] = c.emit1("activation_bwd", {c.in(0), c.out_grads[0]}, c.fwd().attrs);
    return r;
  };
  // The fast kernel's arithmetic: at most an exp, a division and a few
  // multiply-adds per element.
  act.flops = [](const Graph& g, const Node& n) { return 20.0 * static_cast<double>(numel(in_shape(g, n, 0))); };
  register_op(act);

  // activation_bwd(x, dy) -> dx = dy f'(x); dx may overwrite dy.
  OpDef bwd = simple_op("activation_bwd", 1);
  bwd.infer = [](const Graph& g, const Node& n) {
    if (n.inputs.size() != 2) shape_fail(g, n, "activation_bwd takes x, dy");
    check_float(g, n);
    check_kind(g, n);
    expect_like(g, n, 1, 0, "dy must have x's");
    return same_as(g, n, 1);
  };
  bwd.flops = [](const Graph& g, const Node& n) { return 25.0 * static_cast<double>(numel(in_shape(g, n, 0))); };
  register_op(bwd);
}

}  // namespace memfit
