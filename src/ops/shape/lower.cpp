#include "ops/shape/ref.hpp"
#include "runtime/lower/lower_util.hpp"

namespace memfit {
namespace {

// Layout kernels copy whatever they are given: integer values keep their own
// storage type on every device, float values follow the device (wide on
// the double reference).
template <template <class> class K, class P>
std::unique_ptr<kernels::Kernel> make_copy_kernel(DType dt, const LoweredGraph& lg, const P& p) {
  if (dt == DType::i32) return std::make_unique<K<int32_t>>(p);
  if (dt == DType::u8) return std::make_unique<K<uint8_t>>(p);
  return make_ref<K>(lg, p);
}

int64_t norm_axis(int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<int64_t>(rank) : axis; }

// Product of the axes before / after `axis`.
int64_t outer_of(const Shape& s, int64_t axis) {
  int64_t r = 1;
  for (int64_t d = 0; d < axis; ++d) r *= s[static_cast<size_t>(d)];
  return r;
}
int64_t inner_of(const Shape& s, int64_t axis) {
  int64_t r = 1;
  for (size_t d = static_cast<size_t>(axis) + 1; d < s.size(); ++d) r *= s[d];
  return r;
}

}  // namespace

void register_shape_ref_kernels() {
  register_kernel("concat", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Shape& y = shape_of(g, n.outputs[0]);
    const int64_t axis = norm_axis(n.attrs.i("axis"), y.size());
    kernels::ConcatParams p{outer_of(y, axis), inner_of(y, axis), {}};
    for (ValueId v : n.inputs) p.sizes.push_back(shape_of(g, v)[static_cast<size_t>(axis)]);
    return make_copy_kernel<kernels::ref::Concat>(g.value(n.outputs[0]).dtype, lg, p);
  });
  register_kernel("slice", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Shape& x = shape_of(g, n.inputs[0]);
    const int64_t axis = norm_axis(n.attrs.i("axis"), x.size());
    kernels::SliceParams p{outer_of(x, axis), inner_of(x, axis), x[static_cast<size_t>(axis)], n.attrs.i("start"),
                           n.attrs.i("len")};
    return make_copy_kernel<kernels::ref::Slice>(g.value(n.outputs[0]).dtype, lg, p);
  });
  register_kernel("slice_bwd", [](const LoweredGraph& lg, NodeId id) {
    const Graph& g = lg.graph();
    const Node& n = lg.node(id);
    const Shape& x = shape_of(g, n.outputs[0]);
    const int64_t axis = norm_axis(n.attrs.i("axis"), x.size());
    kernels::SliceParams p{outer_of(x, axis), inner_of(x, axis), x[static_cast<size_t>(axis)], n.attrs.i("start"),
                           n.attrs.i("len")};
    return make_ref<kernels::ref::SliceBwd>(lg, p);
  });
  // Views need no kernel.
  register_kernel("reshape", [](const LoweredGraph&, NodeId) { return std::unique_ptr<kernels::Kernel>(); });
}

}  // namespace memfit
