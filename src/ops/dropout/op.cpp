// dropout with a counter-based mask: see ops/dropout/params.hpp (DropoutParams).
// Attributes: p, stream (hash of the layer name).
#include "ops/common/op_common.hpp"

namespace memfit {

void register_dropout_ops() {
  OpDef d;
  d.name = "dropout";
  d.infer = [](const Graph& g, const Node& n) {
    double p = n.attrs.f("p");
    if (!(p >= 0.0 && p < 1.0)) shape_fail(g, n, "dropout probability must be in [0, 1)");
    return std::vector<ValueMeta>{{in_shape(g, n, 0), in_dtype(g, n, 0)}, {in_shape(g, n, 0), DType::u8}};
  };
  d.traits.inplace_input = 0;
  d.grad = [](GradContext& c) {
    std::vector<ValueId> r{kNone};
    if (c.out_grads[0] != kNone && c.need[0])
      r[0] = c.emit1("dropout_bwd", {c.out_grads[0], c.out(1)}, c.fwd().attrs);
    return r;
  };
  register_op(d);
  register_op(simple_op("dropout_bwd", 0));
}

}  // namespace memfit
