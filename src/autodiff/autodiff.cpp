#include "memfit/autodiff.hpp"

#include <map>
#include <set>

#include "memfit/op_registry.hpp"

namespace memfit {
namespace {

// Sum of gradient contributions, emitting add nodes tagged with `layer`.
ValueId sum_contribs(Graph& g, const std::vector<ValueId>& parts, const std::string& layer) {
  if (parts.empty()) return kNone;
  ValueId acc = parts[0];
  for (size_t i = 1; i < parts.size(); ++i)
    acc = g.add1("add", {acc, parts[i]}, {}, layer + ".grad_sum", Phase::Backward);
  return acc;
}

// A table's gradient from two contributions, where one is an embedding_bwd's
// output E and the other, A, a single value made before E's node (a tied
// output projection's weight gradient): E's node takes A as its acc input
// and adds its rows into it (in place where the plan allows) instead of
// scattering into a zeroed table for an add. Saves one table-sized buffer.
// parts becomes {E}.
void fold_into_embedding_grad(Graph& g, std::vector<ValueId>& parts, const std::map<ValueId, int>& uses) {
  if (parts.size() != 2) return;
  for (int e = 0; e < 2; ++e) {
    const ValueId ev = parts[static_cast<size_t>(e)], av = parts[static_cast<size_t>(1 - e)];
    const NodeId pe = g.value(ev).producer, pa = g.value(av).producer;
    if (pe < 0 || pa < 0 || pa >= pe) continue;
    const int acc = op_def(g.node(pe).op).traits.accumulator_input;
    if (acc < 0 || g.node(pe).inputs.size() != static_cast<size_t>(acc)) continue;
    const Value& a = g.value(av);
    if (a.shape != g.value(ev).shape || a.dtype != DType::f32 || a.cls != VClass::Transient) continue;
    if (auto u = uses.find(av); u != uses.end() && u->second > 0) continue;
    g.node(pe).inputs.push_back(av);
    parts = {ev};
    return;
  }
}

}  // namespace

BackwardResult build_backward(Graph& g, ValueId loss, const std::vector<ValueId>& wrt) {
  if (g.value(loss).shape != Shape{1}) throw GraphError("loss must be a scalar [1], got " + shape_str(g.value(loss).shape));
  const size_t nfwd = g.num_nodes();
  std::vector<bool> req(g.num_values(), false);
  std::set<ValueId> wrt_set(wrt.begin(), wrt.end());
  for (size_t v = 0; v < g.num_values(); ++v) {
    const Value& val = g.value(static_cast<ValueId>(v));
    req[v] = (val.cls == VClass::Param && val.trainable) || wrt_set.count(static_cast<ValueId>(v));
  }
  for (size_t i = 0; i < nfwd; ++i) {
    const Node& n = g.node(static_cast<NodeId>(i));
    // Every op passes "requires grad" on, including ops without a gradient
    // rule: the backward pass below refuses one if a gradient reaches it.
    bool any = false;
    for (ValueId v : n.inputs) any = any || req[static_cast<size_t>(v)];
    for (ValueId v : n.outputs) req[static_cast<size_t>(v)] = any;
  }
  if (!req[static_cast<size_t>(loss)]) throw GraphError("the loss does not depend on any trainable parameter");

  BackwardResult res;
  std::map<ValueId, std::vector<ValueId>> contribs;
  res.seed = g.add1("fill", {}, {{"shape", Shape{1}}, {"value", 1.0}}, "loss.grad_seed", Phase::Backward);
  contribs[loss].push_back(res.seed);
  g.value(loss).is_loss = true;
  g.value(loss).is_output = true;

  for (size_t i = nfwd; i-- > 0;) {
    const NodeId nid = static_cast<NodeId>(i);
    const OpDef& def = op_def(g.node(nid).op);
    if (!def.grad) {
      bool reached = false;
      for (ValueId o : g.node(nid).outputs) reached = reached || contribs.count(o);
      bool needed = false;
      for (ValueId v : g.node(nid).inputs) needed = needed || req[static_cast<size_t>(v)];
      if (reached && needed)
        throw GraphError("layer '" + (g.node(nid).layer.empty() ? std::string("?") : g.node(nid).layer) + "' (" +
                         g.node(nid).op + "): the loss's gradient must flow through this op to a trainable "
                         "parameter, but the op has no gradient rule");
      continue;
    }
    // Copy: emitting nodes may reallocate the node vector.
    const std::vector<ValueId> outs = g.node(nid).outputs;
    const std::vector<ValueId> ins = g.node(nid).inputs;
    const std::string layer = g.node(nid).layer;
    GradContext ctx{g, nid, {}, {}};
    bool any_out = false;
    for (ValueId o : outs) {
      auto it = contribs.find(o);
      ValueId d = it == contribs.end() ? kNone : sum_contribs(g, it->second, layer);
      if (it != contribs.end()) contribs.erase(it);
      ctx.out_grads.push_back(d);
      any_out = any_out || d != kNone;
    }
    if (!any_out) continue;
    bool any_need = false;
    for (ValueId v : ins) {
      ctx.need.push_back(req[static_cast<size_t>(v)]);
      any_need = any_need || req[static_cast<size_t>(v)];
    }
    if (!any_need) continue;
    std::vector<ValueId> gin = def.grad(ctx);
    for (size_t k = 0; k < ins.size() && k < gin.size(); ++k)
      if (gin[k] != kNone && ctx.need[k]) contribs[ins[k]].push_back(gin[k]);
    req.resize(g.num_values(), false);
  }

  // Leaves: trainable parameters and `wrt` values. A gradient value must be
  // owned by exactly one leaf and not be read by other nodes; otherwise copy.
  std::map<ValueId, int> uses;
  for (const Node& n : g.nodes())
    for (ValueId v : n.inputs) uses[v]++;
  std::set<ValueId> owned;
  for (auto& [leaf, parts] : contribs) {
    const Value& lv = g.value(leaf);
    bool is_leaf = (lv.cls == VClass::Param && lv.trainable) || wrt_set.count(leaf);
    if (!is_leaf) continue;
    fold_into_embedding_grad(g, parts, uses);
    ValueId d = sum_contribs(g, parts, lv.name);
    const bool is_view = g.value(d).producer >= 0 &&
                         op_def(g.node(g.value(d).producer).op).traits.view_of_input >= 0;
    if (uses[d] > 0 || owned.count(d) || g.value(d).producer < 0 || is_view ||
        g.value(d).cls != VClass::Transient || g.value(d).shape != lv.shape)
      d = g.add1("scale", {d}, {{"alpha", 1.0}}, lv.name + ".grad_copy", Phase::Backward);
    owned.insert(d);
    Value& dv = g.value(d);
    dv.grad_of = leaf;
    if (lv.cls == VClass::Param) {
      dv.cls = VClass::ParamGrad;
      dv.name = lv.name + ".grad";
    } else {
      dv.is_output = true;
      dv.name = lv.name + ".grad";
    }
    g.value(leaf).grad = d;
    res.grads[leaf] = d;
  }
  return res;
}

}  // namespace memfit
