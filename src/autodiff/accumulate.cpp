#include "memfit/accumulate.hpp"

#include <string>
#include <vector>

namespace memfit {

void add_gradient_accumulation(Graph& g, DType acc_type) {
  if (acc_type != DType::f32 && acc_type != DType::bf16)
    throw GraphError(std::string("accumulated gradients are f32 or bf16, not ") + dtype_name(acc_type));
  const size_t before = g.num_nodes();
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
    acc.dtype = acc_type;
    acc.cls = VClass::ParamGrad;
    acc.grad_of = p;
    ValueId a = g.add_value(acc);
    g.value(p).grad = a;
    Attrs at;
    at.set("param", g.value(p).name);  // the bf16 accumulator's rounding stream
    g.add_node("grad_accumulate", {a, micro}, std::move(at), g.value(p).name, Phase::Backward);
  }
  // Run each grad_accumulate right after the node that makes its gradient, so
  // a micro-batch gradient lives for one node, not until the end of backward.
  std::vector<std::vector<NodeId>> after(before);
  for (size_t k = before; k < g.num_nodes(); ++k) {
    NodeId prod = g.value(g.node(static_cast<NodeId>(k)).inputs[1]).producer;
    after[static_cast<size_t>(prod)].push_back(static_cast<NodeId>(k));
  }
  std::vector<NodeId> order;
  for (size_t k = 0; k < before; ++k) {
    order.push_back(static_cast<NodeId>(k));
    for (NodeId a : after[k]) order.push_back(a);
  }
  g.reorder(order);
}

}  // namespace memfit
