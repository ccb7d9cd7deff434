// layer_norm over the last axis of an N-d input (Transformers). Inputs x,
// gamma[D], beta[D] (f32); attr eps (default 1e-5). Outputs y (x's shape and
// type), mean[R] and rstd[R] (f32: the statistics the backward reads, so it
// never needs a normalised copy of x).
// R rows (every axis but the last, multiplied), D the last axis.
#include <cmath>

#include "ops/common/op_last_axis.hpp"

namespace memfit {
namespace {

void check_vector(const Graph& g, const Node& n, size_t i, int64_t len, const char* what) {
  if (in_shape(g, n, i) != Shape{len} || in_dtype(g, n, i) != DType::f32)
    shape_fail(g, n, std::string(what) + " must be f32 [" + std::to_string(len) + "]");
}

}  // namespace

void register_layernorm_ops() {
  OpDef ln;
  ln.name = "layer_norm";
  // y may overwrite x where x is not needed afterwards (inference): each
  // element is read before it is written.
  ln.traits.inplace_input = 0;
  ln.traits.rebuild = true;  // its backward keeps x: y (and the statistics) are three passes over a row
  ln.infer = [](const Graph& g, const Node& n) {
    if (n.inputs.size() != 3) shape_fail(g, n, "layer_norm takes x, gamma, beta");
    const int64_t R = last_axis_rows(g, n);
    const int64_t D = in_shape(g, n, 0).back();
    check_vector(g, n, 1, D, "gamma (weight)");
    check_vector(g, n, 2, D, "beta (bias)");
    const double eps = n.attrs.f("eps", 1e-5);
    if (!(eps >= 0.0) || !std::isfinite(eps)) shape_fail(g, n, "eps must be finite and >= 0, got " + std::to_string(eps));
    return std::vector<ValueMeta>{same_as(g, n, 0)[0], {Shape{R}, DType::f32}, {Shape{R}, DType::f32}};
  };
  ln.grad = [](GradContext& c) {
    std::vector<ValueId> r(3, kNone);
    if (c.out_grads[0] == kNone || !(c.need[0] || c.need[1] || c.need[2])) return r;
    auto outs = c.emit("layer_norm_bwd", {c.in(0), c.out_grads[0], c.in(1), c.out(1), c.out(2)}, c.fwd().attrs);
    for (size_t i = 0; i < 3; ++i) r[i] = c.need[i] ? outs[i] : kNone;
    return r;
  };
  // Two passes for the statistics (add; subtract, multiply-add), one for y
  // (subtract, multiply, multiply-add).
  ln.flops = [](const Graph& g, const Node& n) { return 8.0 * static_cast<double>(numel(in_shape(g, n, 0))); };
  register_op(ln);

  // layer_norm_bwd(x, dy, gamma, mean, rstd) -> dx, dgamma[D], dbeta[D].
  OpDef bwd;
  bwd.name = "layer_norm_bwd";
  bwd.traits.no_gradient = true;
  // dx may overwrite dy: the kernels read a row's dy before writing its dx.
  bwd.traits.inplace_input = 1;
  bwd.infer = [](const Graph& g, const Node& n) {
    if (n.inputs.size() != 5) shape_fail(g, n, "layer_norm_bwd takes x, dy, gamma, mean, rstd");
    const int64_t R = last_axis_rows(g, n);
    const int64_t D = in_shape(g, n, 0).back();
    expect_like(g, n, 1, 0, "dy must have x's");
    check_vector(g, n, 2, D, "gamma");
    check_vector(g, n, 3, R, "mean");
    check_vector(g, n, 4, R, "rstd");
    return std::vector<ValueMeta>{same_as(g, n, 1)[0], {Shape{D}, DType::f32}, {Shape{D}, DType::f32}};
  };
  // Row sums (2 multiply-adds), dx (3), dgamma and dbeta (2).
  bwd.flops = [](const Graph& g, const Node& n) { return 14.0 * static_cast<double>(numel(in_shape(g, n, 0))); };
  register_op(bwd);
}

}  // namespace memfit
