// max_pool2d, avg_pool2d, global_avg_pool and their backward ops.
// N batch, C channels, H/W input size, R/S window, OH/OW output size.
#include "ops/common/op_common.hpp"

namespace memfit {
namespace {

// Pooling's output size over `in` input positions: floor((in + 2 pad -
// window) / stride) + 1, or in ceil mode (max pooling's PyTorch
// ceil_mode=True) rounded up, less one where that last window would start
// past the input and its left padding (ops/pool/params.hpp: PoolParams).
int64_t pool_out_size(int64_t in, int64_t window, int64_t stride, int64_t pad, bool ceil) {
  const int64_t span = in + 2 * pad - window;
  int64_t out = (ceil ? (span + stride - 1) / stride : span / stride) + 1;
  if (ceil && (out - 1) * stride >= in + pad) --out;
  return out;
}

std::vector<ValueMeta> infer_pool(const Graph& g, const Node& n, bool with_idx) {
  expect_rank(g, n, 0, 4);
  const Shape& x = in_shape(g, n, 0);
  auto k = n.attrs.ints("kernel"), st = n.attrs.ints("stride"), pd = n.attrs.ints("pad");
  if (k.size() != 2 || st.size() != 2 || pd.size() != 2) shape_fail(g, n, "kernel, stride and pad take two values");
  for (int a = 0; a < 2; ++a)
    if (k[a] < 1 || st[a] < 1 || pd[a] < 0)
      shape_fail(g, n, "window and stride must be >= 1 and pad >= 0, got window " + std::to_string(k[a]) +
                           ", stride " + std::to_string(st[a]) + ", pad " + std::to_string(pd[a]));
  if (pd[0] * 2 > k[0] || pd[1] * 2 > k[1]) shape_fail(g, n, "padding must be at most half the window");
  const bool ceil = n.attrs.i("ceil", 0) != 0;
  if (ceil && !with_idx) shape_fail(g, n, "ceil mode is max pooling's only");
  if (x[2] + 2 * pd[0] < k[0] || x[3] + 2 * pd[1] < k[1]) shape_fail(g, n, "window larger than the input");
  const int64_t oh = pool_out_size(x[2], k[0], st[0], pd[0], ceil);
  const int64_t ow = pool_out_size(x[3], k[1], st[1], pd[1], ceil);
  Shape y{x[0], x[1], oh, ow};
  std::vector<ValueMeta> r{{y, in_dtype(g, n, 0)}};
  if (with_idx) r.push_back({y, DType::i32});
  return r;
}

}  // namespace

void register_pool_ops() {
  OpDef mp;
  mp.name = "max_pool2d";
  mp.traits.window_max = true;
  mp.infer = [](const Graph& g, const Node& n) { return infer_pool(g, n, true); };
  mp.grad = [](GradContext& c) {
    std::vector<ValueId> r{kNone};
    if (c.out_grads[0] != kNone && c.need[0]) {
      Attrs a = c.fwd().attrs;
      a.set("x_shape", c.g.value(c.in(0)).shape);
      r[0] = c.emit1("max_pool2d_bwd", {c.out_grads[0], c.out(1)}, a);
    }
    return r;
  };
  register_op(mp);

  OpDef ap;
  ap.name = "avg_pool2d";
  ap.infer = [](const Graph& g, const Node& n) { return infer_pool(g, n, false); };
  ap.grad = [](GradContext& c) {
    std::vector<ValueId> r{kNone};
    if (c.out_grads[0] != kNone && c.need[0]) {
      Attrs a = c.fwd().attrs;
      a.set("x_shape", c.g.value(c.in(0)).shape);
      r[0] = c.emit1("avg_pool2d_bwd", {c.out_grads[0]}, a);
    }
    return r;
  };
  register_op(ap);

  for (const char* name : {"max_pool2d_bwd", "avg_pool2d_bwd", "global_avg_pool_bwd"}) {
    OpDef b;
    b.name = name;
    b.traits.no_gradient = true;
    b.infer = [](const Graph& g, const Node& n) {
      return std::vector<ValueMeta>{{n.attrs.ints("x_shape"), in_dtype(g, n, 0)}};
    };
    register_op(b);
  }

  OpDef gp;
  gp.name = "global_avg_pool";
  gp.infer = [](const Graph& g, const Node& n) {
    expect_rank(g, n, 0, 4);
    const Shape& x = in_shape(g, n, 0);
    return std::vector<ValueMeta>{{Shape{x[0], x[1]}, in_dtype(g, n, 0)}};
  };
  gp.grad = [](GradContext& c) {
    std::vector<ValueId> r{kNone};
    if (c.out_grads[0] != kNone && c.need[0])
      r[0] = c.emit1("global_avg_pool_bwd", {c.out_grads[0]}, {{"x_shape", c.g.value(c.in(0)).shape}});
    return r;
  };
  register_op(gp);
}

}  // namespace memfit
