#include "memfit/accumulate.hpp"

namespace memfit {

void add_gradient_accumulation(Graph& g) {
  for (ValueId p : g.trainable_params()) {
    ValueId micro = g.value(p).grad;
    if (micro == kNone) continue;
    Value& mv = g.value(micro);
    mv.cls = VClass::Transient;
    mv.name = g.value(p).name + ".grad_micro";
    mv.grad_of = kNone;
    Value acc;
    acc.name = g.value(p).name + ".grad";
    acc.shape = g.value(p).shape;
    acc.dtype = DType::f32;
    acc.cls = VClass::ParamGrad;
    acc.grad_of = p;
    ValueId a = g.add_value(acc);
    g.value(p).grad = a;
    g.add_node("grad_accumulate", {a, micro}, {}, g.value(p).name, Phase::Backward);
  }
}

}  // namespace memfit
