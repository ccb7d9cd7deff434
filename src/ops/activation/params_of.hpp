// Kernel parameters of an activation or activation_bwd node, shared by the
// reference lowering (ops/activation/lower.cpp) and the fast CPU lowering
// (ops/activation/lower_cpu.cpp). The op's infer has checked the attributes.
#pragma once

#include <stdexcept>

#include "memfit/graph.hpp"
#include "ops/activation/params.hpp"

namespace memfit {

inline kernels::ActivationParams activation_params(const Graph& g, const Node& n) {
  using kernels::ActKind;
  kernels::ActivationParams p;
  p.n = numel(g.value(n.inputs[0]).shape);
  const std::string& k = n.attrs.s("kind");
  if (k == "sigmoid") p.kind = ActKind::Sigmoid;
  else if (k == "tanh") p.kind = ActKind::Tanh;
  else if (k == "silu") p.kind = ActKind::Silu;
  else if (k == "hardswish") p.kind = ActKind::HardSwish;
  else if (k == "exp") p.kind = ActKind::Exp;
  else if (k == "sqrt") p.kind = ActKind::Sqrt;
  else if (k == "clip") {
    p.kind = ActKind::Clip;
    p.a = n.attrs.f("min");
    p.b = n.attrs.f("max");
  } else if (k == "hardsigmoid") {
    p.kind = ActKind::HardSigmoid;
    p.a = n.attrs.f("alpha", 1.0 / 6.0);
    p.b = n.attrs.f("beta", 0.5);
  } else if (k == "leaky_relu") {
    p.kind = ActKind::LeakyRelu;
    p.a = n.attrs.f("alpha", 0.01);
  } else if (k == "elu") {
    p.kind = ActKind::Elu;
    p.a = n.attrs.f("alpha", 1.0);
  } else {
    throw std::logic_error("activation kind \"" + k + "\" has no kernel parameters");
  }
  return p;
}

}  // namespace memfit
