// permute(x): x's axes reordered, attr "perm" (y's axis k is x's axis
// perm[k]), any rank. The gradient permutes dy by the inverse permutation.
#include <string>

#include "ops/common/op_common.hpp"

namespace memfit {
namespace {

std::vector<ValueMeta> infer_permute(const Graph& g, const Node& n) {
  if (n.inputs.size() != 1) shape_fail(g, n, "permute takes one input");
  const Shape& x = in_shape(g, n, 0);
  const auto& perm = n.attrs.ints("perm");
  std::string listed;
  for (int64_t p : perm) listed += (listed.empty() ? "" : ", ") + std::to_string(p);
  std::vector<bool> seen(x.size(), false);
  bool ok = perm.size() == x.size();
  for (size_t k = 0; ok && k < perm.size(); ++k) {
    ok = perm[k] >= 0 && perm[k] < static_cast<int64_t>(x.size()) && !seen[static_cast<size_t>(perm[k])];
    if (ok) seen[static_cast<size_t>(perm[k])] = true;
  }
  if (!ok)
    shape_fail(g, n, "perm [" + listed + "] is not a permutation of the " + std::to_string(x.size()) + " axes of " +
                         shape_str(x));
  Shape y(x.size());
  for (size_t k = 0; k < perm.size(); ++k) y[k] = x[static_cast<size_t>(perm[k])];
  return {{y, in_dtype(g, n, 0)}};
}

std::vector<ValueId> grad_permute(GradContext& c) {
  std::vector<ValueId> r{kNone};
  if (c.out_grads[0] == kNone || !c.need[0]) return r;
  const std::vector<int64_t> perm = c.fwd().attrs.ints("perm");
  std::vector<int64_t> inv(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) inv[static_cast<size_t>(perm[k])] = static_cast<int64_t>(k);
  r[0] = c.emit1("permute", {c.out_grads[0]}, {{"perm", inv}});
  return r;
}

}  // namespace

void register_permute_ops() {
  // Not a view (the bytes move) and not reference_serves_cpu: the scalar
  // reference walks one element at a time; the CPU kernel copies rows or
  // cache-sized tiles across threads (ops/permute/cpu.hpp).
  OpTraits t;
  t.rearranges_input = true;
  register_op({"permute", infer_permute, grad_permute, t, {}});
}

}  // namespace memfit
