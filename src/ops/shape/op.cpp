// Layout ops: reshape (a view: same bytes), concat along an axis, slice.
#include "ops/common/op_common.hpp"

namespace memfit {
namespace {

int64_t norm_axis(const Graph& g, const Node& n, int64_t axis, size_t rank) {
  int64_t r = static_cast<int64_t>(rank);
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) shape_fail(g, n, "axis " + std::to_string(axis) + " out of range");
  return axis;
}

}  // namespace

void register_shape_ops() {
  OpDef rs;
  rs.name = "reshape";
  rs.traits.view_of_input = 0;
  rs.traits.rearranges_input = true;
  rs.infer = [](const Graph& g, const Node& n) {
    const Shape& x = in_shape(g, n, 0);
    Shape y = n.attrs.ints("shape");
    int64_t known = 1, infer_at = -1;
    for (size_t i = 0; i < y.size(); ++i) {
      if (y[i] == -1) {
        if (infer_at >= 0) shape_fail(g, n, "reshape allows one -1");
        infer_at = static_cast<int64_t>(i);
      } else {
        known *= y[i];
      }
    }
    if (infer_at >= 0 && known > 0) y[static_cast<size_t>(infer_at)] = numel(x) / known;
    if (numel(y) != numel(x)) shape_fail(g, n, "cannot reshape " + shape_str(x) + " to " + shape_str(n.attrs.ints("shape")));
    return std::vector<ValueMeta>{{y, in_dtype(g, n, 0)}};
  };
  rs.grad = [](GradContext& c) {
    std::vector<ValueId> r{kNone};
    if (c.out_grads[0] != kNone && c.need[0])
      r[0] = c.emit1("reshape", {c.out_grads[0]}, {{"shape", c.g.value(c.in(0)).shape}});
    return r;
  };
  register_op(rs);

  OpDef cat;
  cat.name = "concat";
  cat.traits.reference_serves_cpu = true;
  cat.infer = [](const Graph& g, const Node& n) {
    if (n.inputs.empty()) shape_fail(g, n, "concat needs inputs");
    Shape y = in_shape(g, n, 0);
    int64_t axis = norm_axis(g, n, n.attrs.i("axis"), y.size());
    for (size_t i = 1; i < n.inputs.size(); ++i) {
      const Shape& s = in_shape(g, n, i);
      if (s.size() != y.size()) shape_fail(g, n, "ranks differ");
      for (size_t d = 0; d < s.size(); ++d)
        if (static_cast<int64_t>(d) != axis && s[d] != y[d]) shape_fail(g, n, "shapes differ off the concat axis");
      y[static_cast<size_t>(axis)] += s[static_cast<size_t>(axis)];
    }
    return std::vector<ValueMeta>{{y, in_dtype(g, n, 0)}};
  };
  cat.grad = [](GradContext& c) {
    std::vector<ValueId> r(c.fwd().inputs.size(), kNone);
    ValueId d = c.out_grads[0];
    if (d == kNone) return r;
    int64_t axis = c.fwd().attrs.i("axis");
    int64_t start = 0;
    for (size_t i = 0; i < r.size(); ++i) {
      const Shape& s = c.g.value(c.in(i)).shape;
      int64_t ax = axis < 0 ? axis + static_cast<int64_t>(s.size()) : axis;
      int64_t len = s[static_cast<size_t>(ax)];
      if (c.need[i]) r[i] = c.emit1("slice", {d}, {{"axis", ax}, {"start", start}, {"len", len}});
      start += len;
    }
    return r;
  };
  register_op(cat);

  OpDef sl;
  sl.name = "slice";
  sl.traits.reference_serves_cpu = true;
  sl.traits.rearranges_input = true;
  sl.infer = [](const Graph& g, const Node& n) {
    Shape y = in_shape(g, n, 0);
    int64_t axis = norm_axis(g, n, n.attrs.i("axis"), y.size());
    int64_t start = n.attrs.i("start"), len = n.attrs.i("len");
    if (start < 0 || len <= 0 || start + len > y[static_cast<size_t>(axis)]) shape_fail(g, n, "slice out of range");
    y[static_cast<size_t>(axis)] = len;
    return std::vector<ValueMeta>{{y, in_dtype(g, n, 0)}};
  };
  // dx is dy placed at [start, start+len) of the axis, zero elsewhere.
  sl.grad = [](GradContext& c) {
    std::vector<ValueId> r{kNone};
    if (c.out_grads[0] == kNone || !c.need[0]) return r;
    Attrs a = c.fwd().attrs;
    a.set("x_shape", c.g.value(c.in(0)).shape);
    r[0] = c.emit1("slice_bwd", {c.out_grads[0]}, a);
    return r;
  };
  register_op(sl);

  // slice_bwd(dy): [x_shape] zeros with dy at the slice's place.
  OpDef slb;
  slb.name = "slice_bwd";
  slb.traits.no_gradient = true;
  slb.traits.reference_serves_cpu = true;
  slb.infer = [](const Graph& g, const Node& n) {
    const Shape x = n.attrs.ints("x_shape");
    const Shape& dy = in_shape(g, n, 0);
    if (x.size() != dy.size()) shape_fail(g, n, "slice_bwd: ranks differ");
    int64_t axis = norm_axis(g, n, n.attrs.i("axis"), x.size());
    const int64_t start = n.attrs.i("start"), len = n.attrs.i("len");
    for (size_t d = 0; d < x.size(); ++d)
      if (static_cast<int64_t>(d) != axis ? dy[d] != x[d] : (dy[d] != len || start < 0 || start + len > x[d]))
        shape_fail(g, n, "slice_bwd: gradient " + shape_str(dy) + " does not fit " + shape_str(x));
    return std::vector<ValueMeta>{{x, in_dtype(g, n, 0)}};
  };
  register_op(slb);
}

}  // namespace memfit
