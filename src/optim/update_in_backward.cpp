// Update in backward (memfit/optim.hpp): one update node per parameter,
// placed where the parameter's gradient is complete and the parameter is no
// longer read, so that gradients are transients of the planned arena.
//
// The update node's layout: inputs [params (n), grads (n), then `states`
// groups of n] (group s, parameter i at 2n + s n + i), attributes count = n,
// states, and per-tensor integer vectors of length n. Each new node keeps
// the op and every other attribute as it was.
#include <algorithm>
#include <string>
#include <vector>

#include "memfit/op_registry.hpp"
#include "memfit/optim.hpp"

namespace memfit {
namespace {

// The attributes of parameter i's own update.
Attrs slice_attrs(const Attrs& a, int64_t n, size_t i) {
  Attrs r;
  for (const auto& [k, v] : a.all()) {
    if (const auto* vec = std::get_if<std::vector<int64_t>>(&v); vec && static_cast<int64_t>(vec->size()) == n)
      r.set(k, std::vector<int64_t>{(*vec)[i]});
    else
      r.set(k, v);
  }
  return r.set("count", int64_t(1));
}

// Backward nodes that only sum or copy parameter gradients (autodiff's
// leaf sums and copies, appended after the whole backward): they may run as
// soon as their inputs exist. Walks the schedule backwards so that every
// reader is classified before the node that feeds it.
std::vector<bool> gradient_only_nodes(const Graph& g, const std::vector<bool>& is_update) {
  std::vector<std::vector<NodeId>> readers(g.num_values());
  for (size_t k = 0; k < g.num_nodes(); ++k)
    for (ValueId v : g.node(static_cast<NodeId>(k)).inputs) readers[static_cast<size_t>(v)].push_back(static_cast<NodeId>(k));
  std::vector<bool> only(g.num_nodes(), false);
  for (size_t k = g.num_nodes(); k-- > 0;) {
    const Node& n = g.node(static_cast<NodeId>(k));
    if (n.phase != Phase::Backward || (n.op != "add" && n.op != "scale") || n.outputs.empty()) continue;
    bool ok = true;
    for (ValueId o : n.outputs) {
      const auto& rs = readers[static_cast<size_t>(o)];
      ok = ok && !g.value(o).is_output && !rs.empty();
      for (NodeId r : rs) ok = ok && (only[static_cast<size_t>(r)] || is_update[static_cast<size_t>(r)]);
    }
    only[k] = ok;
  }
  return only;
}

}  // namespace

std::vector<NodeId> split_update(Graph& g, NodeId u, const std::string& why) {
  const Node un = g.node(u);  // copy: add_node reallocates
  if (un.attrs.f("clip_norm", 0.0) > 0.0)
    throw GraphError(why + " updates each parameter by itself, so it cannot clip gradients by their global norm (the "
                     "norm needs every gradient before the first update): drop --clip-grad-norm");
  const int64_t n = un.attrs.i("count"), states = un.attrs.i("states");
  if (n <= 0 || states < 0 || un.inputs.size() != static_cast<size_t>((2 + states) * n))
    throw GraphError(why + ": " + un.op + " has " + std::to_string(un.inputs.size()) +
                     " inputs, not count x (2 + states) = " + std::to_string(n) + " x " + std::to_string(2 + states));
  const size_t N = static_cast<size_t>(n), S = static_cast<size_t>(states);
  // Parameter i's update: the original node for i = 0, new ones appended.
  std::vector<NodeId> upd(N);
  for (size_t i = 0; i < N; ++i) {
    std::vector<ValueId> ins{un.inputs[i], un.inputs[N + i]};
    for (size_t s = 0; s < S; ++s) ins.push_back(un.inputs[2 * N + s * N + i]);
    Attrs a = slice_attrs(un.attrs, n, i);
    if (i == 0) {
      g.node(u).inputs = std::move(ins);
      g.node(u).attrs = std::move(a);
      upd[0] = u;
    } else {
      g.add_node(un.op, std::move(ins), std::move(a), un.layer, Phase::Update);
      upd[i] = static_cast<NodeId>(g.num_nodes() - 1);
    }
  }
  return upd;
}

int update_in_backward(Graph& g) {
  NodeId u = -1;
  for (size_t k = 0; k < g.num_nodes(); ++k) {
    const Node& n = g.node(static_cast<NodeId>(k));
    if (op_def(n.op).traits.accumulates_gradients)
      throw GraphError("update in backward updates each parameter as soon as its gradient is made, so it cannot "
                       "wait for gradient accumulation's micro-batches: drop --accumulate or --update-in-backward");
    if (n.phase != Phase::Update) continue;
    if (u >= 0) throw GraphError("update in backward: the graph has more than one optimizer update node");
    u = static_cast<NodeId>(k);
  }
  if (u < 0) throw GraphError("update in backward: the graph has no optimizer update (append_optimizer first)");
  if (static_cast<size_t>(u) + 1 != g.num_nodes())
    throw GraphError("update in backward: the optimizer update is not the last node of the step");
  if (g.node(u).attrs.f("clip_norm", 0.0) > 0.0)
    throw GraphError("update in backward cannot clip gradients by their global norm (the norm needs every gradient "
                     "before the first update): drop --clip-grad-norm or --update-in-backward");
  const std::vector<NodeId> upd = split_update(g, u, "update in backward");
  const size_t N = upd.size();
  for (NodeId k : upd) {
    Value& grad = g.value(g.node(k).inputs[1]);
    if (grad.cls == VClass::ParamGrad) grad.cls = VClass::Transient;
  }

  // What each movable node (updates, gradient-only sums) must run after.
  const size_t nn = g.num_nodes();
  std::vector<bool> is_update(nn, false);
  for (NodeId k : upd) is_update[static_cast<size_t>(k)] = true;
  const std::vector<bool> only = gradient_only_nodes(g, is_update);
  std::vector<std::vector<NodeId>> deps(nn);
  for (size_t k = 0; k < nn; ++k) {
    if (!is_update[k] && !only[k]) continue;
    for (ValueId v : g.node(static_cast<NodeId>(k)).inputs)
      if (g.value(v).producer >= 0) deps[k].push_back(g.value(v).producer);
  }
  // An update writes its parameter: every other reader of the parameter or
  // of a view of it runs first.
  std::vector<int64_t> param_of(g.num_values(), -1);  // parameter i, for it and its views
  for (size_t i = 0; i < N; ++i) param_of[static_cast<size_t>(g.node(upd[i]).inputs[0])] = static_cast<int64_t>(i);
  for (size_t k = 0; k < nn; ++k) {
    if (is_update[k]) continue;
    const Node& nd = g.node(static_cast<NodeId>(k));
    for (ValueId v : nd.inputs)
      if (const int64_t i = param_of[static_cast<size_t>(v)]; i >= 0)
        deps[static_cast<size_t>(upd[static_cast<size_t>(i)])].push_back(static_cast<NodeId>(k));
    if (const int view = op_def(nd.op).traits.view_of_input; view >= 0)
      param_of[static_cast<size_t>(nd.outputs.at(0))] = param_of[static_cast<size_t>(nd.inputs[static_cast<size_t>(view)])];
  }

  // Fixed nodes keep their order; a movable node runs right after the last
  // of its dependencies (movable ones in their original order when several
  // become ready at once).
  std::vector<int> waiting(nn, 0);
  std::vector<std::vector<NodeId>> dependents(nn);
  for (size_t k = 0; k < nn; ++k) {
    std::sort(deps[k].begin(), deps[k].end());
    deps[k].erase(std::unique(deps[k].begin(), deps[k].end()), deps[k].end());
    waiting[k] = static_cast<int>(deps[k].size());
    for (NodeId d : deps[k]) dependents[static_cast<size_t>(d)].push_back(static_cast<NodeId>(k));
  }
  std::vector<NodeId> order, ready;
  order.reserve(nn);
  auto place = [&](NodeId k) {
    order.push_back(k);
    for (NodeId d : dependents[static_cast<size_t>(k)])
      if (--waiting[static_cast<size_t>(d)] == 0) ready.push_back(d);
  };
  auto emit = [&](NodeId k) {
    place(k);
    while (!ready.empty()) {
      const auto first = std::min_element(ready.begin(), ready.end());
      const NodeId next = *first;
      ready.erase(first);
      place(next);
    }
  };
  // (A movable node without dependencies stays where it is.)
  for (size_t k = 0; k < nn; ++k)
    if (!(is_update[k] || only[k]) || deps[k].empty()) emit(static_cast<NodeId>(k));
  if (order.size() != nn) throw std::logic_error("update in backward: a dependency cycle in the schedule");
  g.reorder(order);
  return static_cast<int>(N);
}

}  // namespace memfit
