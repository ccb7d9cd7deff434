// binary(a, b): a (kind) b element-wise with numpy broadcasting; attr kind
// is add, sub, mul or div (ops/binary/params.hpp). a and b share one float
// type; the output has it, and the broadcast shape (right-aligned axes, each
// equal or 1 in one of them). Squeeze-and-excitation's x * s, a residual
// scale, a normalisation by a computed tensor. The backward binary_bwd(a, b,
// dy) (attr wrt: 0 or 1) gives one input's gradient, summed over the axes
// that input is broadcast along.
#include "ops/common/op_common.hpp"

namespace memfit {
namespace {

void check_kind(const Graph& g, const Node& n) {
  if (!n.attrs.has("kind")) shape_fail(g, n, n.op + " needs attr kind");
  const std::string& k = n.attrs.s("kind");
  if (k != "add" && k != "sub" && k != "mul" && k != "div")
    shape_fail(g, n, "unknown binary kind \"" + k + "\" (known: add, sub, mul, div)");
}

// The broadcast shape of inputs 0 and 1, checked.
Shape broadcast_shape(const Graph& g, const Node& n) {
  const Shape& a = in_shape(g, n, 0);
  const Shape& b = in_shape(g, n, 1);
  if (!is_float(in_dtype(g, n, 0)) || in_dtype(g, n, 0) != in_dtype(g, n, 1))
    shape_fail(g, n, n.op + " needs two inputs of one float type");
  const size_t r = std::max(a.size(), b.size());
  Shape y(r);
  for (size_t k = 0; k < r; ++k) {
    const int64_t da = k + a.size() >= r ? a[k + a.size() - r] : 1, db = k + b.size() >= r ? b[k + b.size() - r] : 1;
    if (da != db && da != 1 && db != 1)
      shape_fail(g, n, "shapes " + shape_str(a) + " and " + shape_str(b) + " do not broadcast (axis " +
                           std::to_string(k) + ": " + std::to_string(da) + " and " + std::to_string(db) + ")");
    y[k] = std::max(da, db);
  }
  return y;
}

}  // namespace

void register_binary_ops() {
  OpDef d;
  d.name = "binary";
  d.infer = [](const Graph& g, const Node& n) {
    if (n.inputs.size() != 2) shape_fail(g, n, "binary takes a, b");
    check_kind(g, n);
    return std::vector<ValueMeta>{{broadcast_shape(g, n), in_dtype(g, n, 0)}};
  };
  d.grad = [](GradContext& c) {
    std::vector<ValueId> r{kNone, kNone};
    if (c.out_grads[0] == kNone) return r;
    for (int64_t w = 0; w < 2; ++w) {
      if (!c.need[static_cast<size_t>(w)]) continue;
      Attrs a{{"kind", c.fwd().attrs.s("kind")}, {"wrt", w}};
      r[static_cast<size_t>(w)] = c.emit1("binary_bwd", {c.in(0), c.in(1), c.out_grads[0]}, a);
    }
    return r;
  };
  d.flops = [](const Graph& g, const Node& n) { return static_cast<double>(numel(g.value(n.outputs[0]).shape)); };
  d.traits.rebuild = true;  // one pass over its inputs, which its backward keeps
  register_op(d);

  OpDef bwd;
  bwd.name = "binary_bwd";
  bwd.traits.no_gradient = true;
  bwd.infer = [](const Graph& g, const Node& n) {
    if (n.inputs.size() != 3) shape_fail(g, n, "binary_bwd takes a, b, dy");
    check_kind(g, n);
    const int64_t w = n.attrs.i("wrt", -1);
    if (w != 0 && w != 1) shape_fail(g, n, "binary_bwd needs attr wrt 0 or 1");
    if (in_shape(g, n, 2) != broadcast_shape(g, n) || in_dtype(g, n, 2) != in_dtype(g, n, 0))
      shape_fail(g, n, "dy must have the broadcast shape " + shape_str(broadcast_shape(g, n)) + " and the inputs' type");
    return std::vector<ValueMeta>{{in_shape(g, n, static_cast<size_t>(w)), in_dtype(g, n, 0)}};
  };
  bwd.flops = [](const Graph& g, const Node& n) { return 3.0 * static_cast<double>(numel(in_shape(g, n, 2))); };
  register_op(bwd);
}

}  // namespace memfit
