#include <map>
#include <mutex>

#include "memfit/op_registry.hpp"

namespace memfit {

void register_builtin_ops();  // src/graph/register_ops.cpp

namespace {
std::map<std::string, OpDef>& table() {
  static std::map<std::string, OpDef> t;
  return t;
}
void ensure_builtins() {
  static std::once_flag once;
  std::call_once(once, [] { register_builtin_ops(); });
}
}  // namespace

void register_op(OpDef def) {
  auto name = def.name;
  // Every op says how gradients pass it: a rule, or none by intent.
  if (!def.grad && !def.traits.no_gradient)
    throw GraphError("op '" + name + "' has no gradient rule and is not marked no_gradient");
  if (def.grad && def.traits.no_gradient) throw GraphError("op '" + name + "' has a gradient rule but is marked no_gradient");
  table()[name] = std::move(def);
}

const OpDef& op_def(const std::string& name) {
  ensure_builtins();
  auto it = table().find(name);
  if (it == table().end()) throw GraphError("unknown op '" + name + "'");
  return it->second;
}

std::vector<std::string> registered_ops() {
  ensure_builtins();
  std::vector<std::string> r;
  for (auto& [k, v] : table()) r.push_back(k);
  return r;
}

void shape_fail(const Graph& g, const Node& n, const std::string& what) {
  throw GraphError("layer '" + (n.layer.empty() ? std::string("?") : n.layer) + "' (" + n.op +
                   "): " + what + "; inputs " + [&] {
                     std::string s;
                     for (size_t i = 0; i < n.inputs.size(); ++i)
                       s += (i ? ", " : "") + shape_str(g.value(n.inputs[i]).shape);
                     return s;
                   }());
}

void expect_rank(const Graph& g, const Node& n, size_t input, size_t rank) {
  const auto& s = g.value(n.inputs.at(input)).shape;
  if (s.size() != rank)
    shape_fail(g, n, "input " + std::to_string(input) + " must have rank " + std::to_string(rank) +
                         ", got " + shape_str(s));
}

}  // namespace memfit
