// The builder's lstm(): chained lstm nodes with PyTorch's parameter names.
#include <cmath>

#include "memfit/builder.hpp"

namespace memfit {

LstmOut lstm(Builder& b, ValueId x, int64_t hidden, LstmOpts o) {
  const Shape xs = b.g.value(x).shape;
  if (hidden < 1 || o.layers < 1 || xs.size() != 3)
    throw GraphError("layer '" + b.full(o.name) + "' (lstm): needs x [N, T, I], hidden >= 1 and layers >= 1 (got x " +
                     shape_str(xs) + ", hidden " + std::to_string(hidden) + ", layers " + std::to_string(o.layers) + ")");
  auto sc = b.scope(o.name);
  std::string layer = b.full("");
  layer.pop_back();
  const InitSpec init{InitSpec::Uniform, 1.0 / std::sqrt(double(hidden))};
  LstmOut r;
  for (int64_t k = 0; k < o.layers; ++k) {
    const int64_t in = b.g.value(x).shape[2];
    const std::string sfx = "_l" + std::to_string(k);
    std::vector<ValueId> ins{b.g.param(b.full("weight_ih" + sfx), {4 * hidden, in}),
                             b.g.param(b.full("weight_hh" + sfx), {4 * hidden, hidden}),
                             b.g.param(b.full("bias_ih" + sfx), {4 * hidden}),
                             b.g.param(b.full("bias_hh" + sfx), {4 * hidden})};
    for (ValueId p : ins) b.g.value(p).init = init;
    no_weight_decay(b, ins[2]);  // biases: no weight decay where the optimizer exempts them
    no_weight_decay(b, ins[3]);
    ins.insert(ins.begin(), x);
    if (o.lengths != kNone) ins.push_back(o.lengths);
    const auto outs = b.g.add_node("lstm", ins, {}, o.layers == 1 ? layer : layer + sfx);
    x = outs[0];
    r.h_last.push_back(outs[1]);
    r.c_last.push_back(outs[2]);
  }
  r.y = x;
  return r;
}

}  // namespace memfit
