#include "memfit/accumulate.hpp"

#include <map>
#include <string>
#include <vector>

namespace memfit {
namespace {

// A value no node makes or reads any more (its producer was fused into an
// accumulation): it keeps its id and holds no bytes.
void retire(Graph& g, ValueId v) {
  Value& val = g.value(v);
  val.shape = Shape{0};
  val.producer = -1;
  val.name += ":fused";
}

// The matmul node making `v` (f32, 2-D operands, v of the accumulator's
// shape), or -1.
NodeId fusable_matmul(const Graph& g, ValueId v, const Shape& shape) {
  const NodeId k = g.value(v).producer;
  if (k < 0) return -1;
  const Node& n = g.node(k);
  if (n.op != "matmul" || n.outputs.size() != 1 || n.inputs.size() != 2 || g.value(v).dtype != DType::f32 ||
      g.value(v).shape != shape)
    return -1;
  for (ValueId x : n.inputs)
    if (g.value(x).dtype != DType::f32 || g.value(x).shape.size() != 2) return -1;
  return k;
}

// Fuses the accumulation of parameter p's micro-batch gradient `micro` into
// bf16 accumulator `acc` where micro's maker allows; false where it does
// not (the caller adds a grad_accumulate). `uses`: readers of each value.
bool fuse_bf16_accumulation(Graph& g, ValueId p, ValueId micro, ValueId acc, const std::map<ValueId, int>& uses) {
  const std::string& param = g.value(p).name;
  const Shape shape = g.value(p).shape;
  auto used = [&](ValueId v) {
    auto u = uses.find(v);
    return u != uses.end() && u->second > 0;
  };
  if (used(micro)) return false;
  auto to_matmul = [&](NodeId k, ValueId made, int64_t part) {
    Node& n = g.node(k);
    Attrs at;
    at.set("trans_a", n.attrs.i("trans_a", 0));
    at.set("trans_b", n.attrs.i("trans_b", 0));
    at.set("param", param);
    at.set("first", int64_t(1));
    at.set("part", part);
    n.op = "grad_accumulate_matmul";
    n.inputs = {acc, n.inputs[0], n.inputs[1]};
    n.attrs = std::move(at);
    n.outputs.clear();
    retire(g, made);
  };
  if (NodeId k = fusable_matmul(g, micro, shape); k >= 0) {
    to_matmul(k, micro, 0);
    return true;
  }
  const NodeId e = g.value(micro).producer;
  if (e < 0) return false;
  Node& en = g.node(e);
  if (en.op != "embedding_bwd" || en.outputs.size() != 1 || g.value(en.inputs[1]).dtype != DType::f32 ||
      g.value(micro).dtype != DType::f32)
    return false;
  NodeId head = -1;
  if (en.inputs.size() == 3) {
    // A tied table: the head's product made first, the rows added after.
    const ValueId a = en.inputs[2];
    head = fusable_matmul(g, a, shape);
    if (head < 0 || uses.at(a) != 1) return false;
    to_matmul(head, a, 0);
  }
  Node& rows = g.node(e);
  Attrs at;
  at.set("param", param);
  at.set("first", int64_t(head < 0 ? 1 : 0));
  at.set("part", int64_t(head < 0 ? 0 : 1));
  rows.op = "grad_accumulate_rows";
  rows.inputs = {acc, rows.inputs[0], rows.inputs[1]};
  rows.attrs = std::move(at);
  rows.outputs.clear();
  retire(g, micro);
  return true;
}

}  // namespace

void add_gradient_accumulation(Graph& g, DType acc_type) {
  if (acc_type != DType::f32 && acc_type != DType::bf16)
    throw GraphError(std::string("accumulated gradients are f32 or bf16, not ") + dtype_name(acc_type));
  const size_t before = g.num_nodes();
  std::map<ValueId, int> uses;
  for (const Node& n : g.nodes())
    for (ValueId v : n.inputs) ++uses[v];
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
    if (acc_type == DType::bf16 && fuse_bf16_accumulation(g, p, micro, a, uses)) continue;
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
