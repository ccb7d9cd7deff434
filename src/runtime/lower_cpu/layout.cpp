#include "runtime/lower_cpu/layout.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>

#include "memfit/op_registry.hpp"
#include "runtime/lower_cpu/cpu_util.hpp"

namespace memfit {
namespace {

using kernels::cpu::Layout;


bool candidate(const Value& v) {
  return (v.dtype == DType::f32 || v.dtype == DType::bf16) && v.shape.size() == 4 && v.shape[1] % kernels::cpu::kChannelBlock == 0 &&
         v.cls == VClass::Transient && !v.is_output;
}

// The node gets its fast kernel (the lowering files' own conditions).
bool fast_node(const Graph& g, const Node& n) {
  return cpu_act(g, n) && cpu_kernel_takes(g, n);
}

struct Sets {
  std::vector<size_t> parent;
  explicit Sets(size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), size_t(0)); }
  size_t find(size_t v) {
    while (parent[v] != v) v = parent[v] = parent[parent[v]];
    return v;
  }
  void join(size_t a, size_t b) { parent[find(a)] = find(b); }
};

}  // namespace

std::unique_ptr<kernels::Kernel> blocked_checked(std::unique_ptr<kernels::Kernel> k, bool any_blocked, const Graph& g,
                                                 const Node& n) {
  if (!k && any_blocked)
    throw std::logic_error("no fast CPU kernel for " + describe(g, n) + ", whose operands are channel-blocked");
  return k;
}

std::vector<Layout> cpu_layouts(const Graph& g) {
  const size_t V = g.num_values();
  std::vector<Layout> out(V, Layout::Plain);
  Sets sets(V);
  std::vector<bool> ok(V);
  for (size_t v = 0; v < V; ++v) ok[v] = candidate(g.value(static_cast<ValueId>(v)));
  // Which operands each op's fast kernel takes blocked: the CPU table's.
  const KernelTable& cpu = kernel_table("cpu");
  auto listed = [](const OperandLayouts* r, size_t i, bool input) {
    if (!r) return false;
    const auto& l = input ? r->ins : r->outs;
    return std::find(l.begin(), l.end(), i) != l.end();
  };
  // Link the operands of same-layout ops; a non-candidate among them rules
  // the whole set out (below, once the sets are complete).
  std::vector<size_t> poisoned;
  for (const Node& n : g.nodes()) {
    const OperandLayouts* r = cpu.layouts(n.op);
    const bool fast = r && fast_node(g, n);
    std::vector<size_t> linked;
    for (int side = 0; side < 2; ++side) {
      const auto& vs = side == 0 ? n.inputs : n.outputs;
      for (size_t i = 0; i < vs.size(); ++i) {
        const auto v = static_cast<size_t>(vs[i]);
        const bool takes = fast && listed(r, i, side == 0);
        if (!takes) {
          poisoned.push_back(v);
          continue;
        }
        if (r->same) linked.push_back(v);
      }
    }
    for (size_t k = 1; k < linked.size(); ++k) sets.join(linked[k - 1], linked[k]);
  }
  std::vector<bool> root_ok(V, true);
  for (size_t v = 0; v < V; ++v)
    if (!ok[v]) root_ok[sets.find(v)] = false;
  for (size_t v : poisoned) root_ok[sets.find(v)] = false;
  for (size_t v = 0; v < V; ++v)
    if (ok[v] && root_ok[sets.find(v)]) out[v] = Layout::Blocked16;
  return out;
}

}  // namespace memfit
