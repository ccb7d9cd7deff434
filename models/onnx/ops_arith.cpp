// ONNX elementwise arithmetic as memfit ops, and its folding where the
// operands are constants known at import time (models/onnx/convert.hpp).
#include <algorithm>
#include <cmath>
#include <limits>

#include "models/onnx/convert.hpp"

namespace memfit::models::onnx_import {

// b without its leading 1 axes, if that is a's trailing axes (a bias
// [1, C] or [C] over [N, C]); empty otherwise.
Shape trailing_of(const Shape a, Shape b) {
  while (!b.empty() && b[0] == 1 && b.size() > 1) b.erase(b.begin());
  if (b.size() > a.size() || !std::equal(b.begin(), b.end(), a.end() - static_cast<int64_t>(b.size()))) return {};
  return b;
}

Shape const_dims(const Const& c) { return c.dims.empty() && c.size() != 1 ? Shape{c.size()} : c.dims; }

// The element count of dims, refused past kMaxFolded.
int64_t folded_count(Env& e, const onnx::NodeProto& n, const Shape& dims) {
  int64_t count = 1;
  for (int64_t d : dims) {
    if (d < 1) refuse(e.f, n, "shape " + shape_str(dims) + " has an entry below 1: memfit's tensors are never empty");
    if (__builtin_mul_overflow(count, d, &count) || count > kMaxFolded)
      refuse(e.f, n, "makes a constant of shape " + shape_str(dims) + ": memfit folds constants of up to 2^24 elements");
  }
  return count;
}

// Whether `name` is a constant that arithmetic folds: one a node made
// (Constant, Shape, ConstantOfShape, ...), an integer initializer or a
// single-number one. A float initializer of several numbers is a weight (a
// parameter once a node reads it as a tensor) and never folds.
bool foldable(Env& e, const std::string& name) {
  if (e.consts.count(name)) return true;
  if (!is_const(e, name)) return false;
  const Const& c = e.f.initializers.at(name);
  return !c.is_float || c.size() == 1;
}

// Element k of c as a double.
double const_at(const Const& c, int64_t k) {
  return c.is_float ? static_cast<double>((*c.f)[static_cast<size_t>(k)]) : static_cast<double>(c.i[static_cast<size_t>(k)]);
}

// The numpy broadcast of constant shapes a and b; refuses shapes that do not
// broadcast and results past kMaxFolded elements.

// For each element of `out` (row-major), its index into a constant of
// shape `in` broadcast to out.
std::vector<int64_t> broadcast_index(const Shape& in, const Shape& out) {
  const size_t r = out.size();
  std::vector<int64_t> idx(static_cast<size_t>(numel(out)));
  std::vector<int64_t> at(r, 0);
  for (size_t k = 0; k < idx.size(); ++k) {
    int64_t src = 0;
    for (size_t a = r - in.size(); a < r; ++a) {
      const int64_t d = in[a - (r - in.size())];
      src = src * d + (d == 1 ? 0 : at[a]);
    }
    idx[k] = src;
    for (size_t a = r; a-- > 0;)
      if (++at[a] < out[a]) break;
      else at[a] = 0;
  }
  return idx;
}

// The constant of shape dims whose element k is c's element idx[k].
Const gathered(const Const& c, const Shape& dims, const std::vector<int64_t>& idx) {
  Const r;
  r.dims = dims;
  r.is_float = c.is_float;
  if (c.is_float) {
    auto f = std::make_shared<std::vector<float>>(idx.size());
    for (size_t k = 0; k < idx.size(); ++k) (*f)[k] = (*c.f)[static_cast<size_t>(idx[k])];
    r.f = std::move(f);
  } else {
    r.i.resize(idx.size());
    for (size_t k = 0; k < idx.size(); ++k) r.i[k] = c.i[static_cast<size_t>(idx[k])];
  }
  return r;
}

Shape broadcast_dims(Env& e, const onnx::NodeProto& n, const Shape& a, const Shape& b) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t k = 0; k < r; ++k) {
    const int64_t x = k + a.size() >= r ? a[k + a.size() - r] : 1;
    const int64_t y = k + b.size() >= r ? b[k + b.size() - r] : 1;
    if (x != y && x != 1 && y != 1) refuse(e.f, n, "cannot broadcast " + shape_str(a) + " with " + shape_str(b));
    out[k] = x == 1 ? y : x;
  }
  folded_count(e, n, out);
  return out;
}

// Add, Sub, Mul and Div of import-time constants with numpy broadcasting:
// shape computations in integers (checked for overflow, division
// truncating as ONNX's integer Div), and the float constants a model
// computes from them, such as BERT's attention mask (1 - mask) * min.
bool fold_arith(Env& e, const onnx::NodeProto& n) {
  if (!foldable(e, n.input(0)) || !foldable(e, n.input(1))) return false;
  const Const &a = constant(e, n, 0), &c = constant(e, n, 1);
  const Shape out = broadcast_dims(e, n, const_dims(a), const_dims(c));
  const std::vector<int64_t> ia = broadcast_index(const_dims(a), out), ic = broadcast_index(const_dims(c), out);
  const std::string& op = n.op_type();
  Const r;
  r.dims = a.dims.empty() && c.dims.empty() ? Shape{} : out;
  r.is_float = a.is_float || c.is_float;
  if (op == "Mod" && r.is_float && attr_i(n, "fmod", 0) != 1) refuse(e.f, n, "Mod of floats needs fmod=1 (ONNX's rule)");
  if (r.is_float) {
    auto f = std::make_shared<std::vector<float>>(ia.size());
    for (size_t k = 0; k < ia.size(); ++k) {
      const double x = const_at(a, ia[k]), y = const_at(c, ic[k]);
      (*f)[k] = static_cast<float>(op == "Add"   ? x + y
                                   : op == "Sub" ? x - y
                                   : op == "Mul" ? x * y
                                   : op == "Pow" ? std::pow(x, y)
                                   : op == "Mod" ? std::fmod(x, y)
                                   : op == "Max" ? std::max(x, y)
                                   : op == "Min" ? std::min(x, y)
                                                 : x / y);
    }
    r.f = std::move(f);
    bind_const(e, n, std::move(r));
    return true;
  }
  if (op == "Pow") refuse(e.f, n, "raises integers to a power: memfit folds Pow on floats (a scale such as d ** 0.5)");
  // Mod of integers: fmod=1 keeps the dividend's sign (C's %), fmod=0 the
  // divisor's (Python's %, which torch's remainder writes).
  const bool c_mod = attr_i(n, "fmod", 0) == 1;
  r.i.resize(ia.size());
  for (size_t k = 0; k < ia.size(); ++k) {
    const int64_t x = a.i[static_cast<size_t>(ia[k])], y = c.i[static_cast<size_t>(ic[k])];
    if ((op == "Div" || op == "Mod") && y == 0) refuse(e.f, n, "divides by zero");
    int64_t v = 0;
    bool over = false;
    if (op == "Max" || op == "Min") v = op == "Max" ? std::max(x, y) : std::min(x, y);
    else if (op == "Add") over = __builtin_add_overflow(x, y, &v);
    else if (op == "Sub") over = __builtin_sub_overflow(x, y, &v);
    else if (op == "Mul") over = __builtin_mul_overflow(x, y, &v);
    else if (x == std::numeric_limits<int64_t>::min() && y == -1) v = 0, over = op == "Div";
    else if (op == "Mod") v = x % y, v = !c_mod && v != 0 && ((v < 0) != (y < 0)) ? v + y : v;
    else v = x / y;
    if (over) refuse(e.f, n, "overflows 64-bit integers on its constant inputs");
    r.i[k] = v;
  }
  bind_const(e, n, std::move(r));
  return true;
}

// Add, Sub, Mul or Div of two tensors with numpy broadcasting: memfit's
// binary op (squeeze-and-excitation's x * s, a computed scale or shift).
void op_binary(Env& e, const onnx::NodeProto& n) {
  if (fold_arith(e, n)) return;
  const std::string& op = n.op_type();
  const std::string kind = op == "Add" ? "add" : op == "Sub" ? "sub" : op == "Mul" ? "mul" : "div";
  const ValueId a = value(e, n, 0), c = value(e, n, 1);
  bind(e, n, e.b.g.add1("binary", {a, c}, {{"kind", kind}}, layer_of(e, n)));
}

void op_add(Env& e, const onnx::NodeProto& n) {
  if (fold_arith(e, n)) return;
  const ValueId a = value(e, n, 0), c = value(e, n, 1);
  const Shape as = shape_of(e, a), cs = shape_of(e, c);
  if (as == cs) return bind(e, n, add(e.b, a, c));
  // A bias: the smaller operand broadcast over the larger one's leading axes.
  const bool c_small = numel(cs) <= numel(as);
  const ValueId big = c_small ? a : c, small = c_small ? c : a;
  const Shape t = trailing_of(shape_of(e, big), shape_of(e, small));
  if (t.empty()) return op_binary(e, n);  // any other broadcast
  const ValueId s = t == shape_of(e, small) ? small : reshape(e.b, small, t);
  bind(e, n, add_broadcast(e.b, big, s));
}

// Mul and Div by a scalar constant: memfit's scale; of two tensors, its
// binary op.
void op_scale(Env& e, const onnx::NodeProto& n) {
  if (fold_arith(e, n)) return;
  const bool div = n.op_type() == "Div";
  int k = is_const(e, n.input(1)) ? 1 : !div && is_const(e, n.input(0)) ? 0 : -1;
  if (k >= 0 && constant(e, n, k).size() != 1) k = -1;  // a constant tensor: a broadcast operand
  if (k < 0) return op_binary(e, n);
  double s = const_scalar(e, n, k);
  if (div) {
    if (s == 0) refuse(e.f, n, "divides by zero");
    s = 1.0 / s;
  }
  const ValueId x = value(e, n, 1 - k);
  bind(e, n, e.b.g.add1("scale", {x}, {{"alpha", s}}, layer_of(e, n)));
}

// Range(start, limit, delta) of constants (torch.arange): a constant.
void op_range(Env& e, const onnx::NodeProto& n) {
  const double start = const_scalar(e, n, 0), limit = const_scalar(e, n, 1), delta = const_scalar(e, n, 2);
  if (delta == 0) refuse(e.f, n, "has delta 0");
  const double steps = std::max(0.0, std::ceil((limit - start) / delta));
  if (!(steps <= double(int64_t(1) << 24))) refuse(e.f, n, "makes " + std::to_string(steps) + " numbers");
  const auto count = static_cast<int64_t>(steps);
  Const c;
  c.is_float = constant(e, n, 0).is_float;
  if (c.is_float) c.f = std::make_shared<std::vector<float>>();
  for (int64_t k = 0; k < count; ++k) {
    const double v = start + static_cast<double>(k) * delta;
    if (c.is_float) std::const_pointer_cast<std::vector<float>>(c.f)->push_back(static_cast<float>(v));
    else c.i.push_back(static_cast<int64_t>(v));
  }
  c.dims = {count};
  bind_const(e, n, std::move(c));
}

// Equal of constants (a mask computed from a buffer, mask == 0): a
// constant of 0/1, with numpy broadcasting.
void op_equal(Env& e, const onnx::NodeProto& n) {
  if (!foldable(e, n.input(0)) || !foldable(e, n.input(1)))
    refuse(e.f, n, "compares tensors of the graph: memfit imports Equal on constants only (an attention mask)");
  const Const &a = constant(e, n, 0), &b = constant(e, n, 1);
  const Shape out = broadcast_dims(e, n, const_dims(a), const_dims(b));
  const std::vector<int64_t> ia = broadcast_index(const_dims(a), out), ib = broadcast_index(const_dims(b), out);
  Const r;
  r.dims = a.dims.empty() && b.dims.empty() ? Shape{} : out;
  for (size_t k = 0; k < ia.size(); ++k) r.i.push_back(const_at(a, ia[k]) == const_at(b, ib[k]));
  bind_const(e, n, std::move(r));
}

// Not of a constant (a comparison's negation in a mask's arithmetic): 1
// where it is 0, else 0.
void op_not(Env& e, const onnx::NodeProto& n) {
  if (!foldable(e, n.input(0))) refuse(e.f, n, "negates a tensor of the graph: memfit imports Not on constants only (a mask)");
  const Const& a = constant(e, n, 0);
  Const r;
  r.dims = a.dims;
  for (int64_t k = 0; k < a.size(); ++k) r.i.push_back(const_at(a, k) == 0);
  bind_const(e, n, std::move(r));
}

// Where(cond, x, y) of constants, with numpy broadcasting: a constant (a
// shape or mask computation; torch writes expand(-1) as Where(shape == -1,
// 1, shape)). Where on a tensor of the graph is an attention mask's only
// (patterns.cpp).
void op_where(Env& e, const onnx::NodeProto& n) {
  for (int k = 0; k < 3; ++k)
    if (!foldable(e, n.input(k)))
      refuse(e.f, n, "input '" + n.input(k) + "' is a tensor of the graph: memfit imports Where on constants, and "
                     "as an attention's mask");
  const Const &c = constant(e, n, 0), &x = constant(e, n, 1), &y = constant(e, n, 2);
  if (x.is_float != y.is_float) refuse(e.f, n, "chooses between a float and an integer constant");
  const Shape out = broadcast_dims(e, n, broadcast_dims(e, n, const_dims(c), const_dims(x)), const_dims(y));
  const std::vector<int64_t> ic = broadcast_index(const_dims(c), out), ix = broadcast_index(const_dims(x), out),
                             iy = broadcast_index(const_dims(y), out);
  Const r;
  r.dims = c.dims.empty() && x.dims.empty() && y.dims.empty() ? Shape{} : out;
  r.is_float = x.is_float;
  std::vector<float> f;
  for (size_t k = 0; k < ic.size(); ++k) {
    const bool take_x = const_at(c, ic[k]) != 0;
    if (r.is_float) f.push_back((*(take_x ? x : y).f)[static_cast<size_t>(take_x ? ix[k] : iy[k])]);
    else r.i.push_back((take_x ? x : y).i[static_cast<size_t>(take_x ? ix[k] : iy[k])]);
  }
  if (r.is_float) r.f = std::make_shared<std::vector<float>>(std::move(f));
  bind_const(e, n, std::move(r));
}

// Sqrt of a constant (a scale computed from a shape, 1 / sqrt(d) as an
// exported scaled_dot_product_attention writes it), folded; of a tensor of
// the graph, the activation (its derivative at 0 taken as 0).
void op_sqrt(Env& e, const onnx::NodeProto& n) {
  unary(e, n, "sqrt", [](double v) { return std::sqrt(v); }, [&](double v) {
    if (v < 0) refuse(e.f, n, "takes the square root of " + std::to_string(v));
  });
}

// Pow of constants (a scale computed from a shape); elsewhere only inside
// GELU's tanh form (patterns.cpp).
void op_pow(Env& e, const onnx::NodeProto& n) {
  if (!fold_arith(e, n)) refuse(e.f, n, "raises a tensor of the graph to a power: memfit imports Pow on constants and "
                                       "inside GELU only");
}

// Max and Min of constants (a shifted window's padding, max(0, w - H)):
// two inputs with broadcasting, or one (itself).
void op_max_min(Env& e, const onnx::NodeProto& n) {
  if (n.input_size() == 1 && foldable(e, n.input(0))) return bind_const(e, n, constant(e, n, 0));
  if (n.input_size() != 2 || !fold_arith(e, n))
    refuse(e.f, n, "takes the " + std::string(n.op_type() == "Max" ? "maximum" : "minimum") +
                       " of tensors of the graph, or of more than two: memfit imports " + n.op_type() +
                       " of two constants only");
}

// ScatterND(data, indices, updates) of constants, no reduction (a mask
// built by slice assignment, Swin's shifted-window regions): a copy of data
// with the slices indices[..] names set from updates.
void op_scatter_nd(Env& e, const onnx::NodeProto& n) {
  if (attr_s(n, "reduction", "none") != "none") refuse(e.f, n, "reduction " + attr_s(n, "reduction", "") + " is not supported");
  if (!is_const(e, n.input(1)) || !foldable(e, n.input(2)))
    refuse(e.f, n, "scatters from a tensor of the graph: memfit imports ScatterND of constant updates only");
  if (!foldable(e, n.input(0))) return scatter_into_tensor(e, n);
  bind_const(e, n, scattered(e, n, constant(e, n, 0)));
}

// data with the slices indices[..] names set from the constant updates.
Const scattered(Env& e, const onnx::NodeProto& n, Const r) {
  const Const &ix = constant(e, n, 1), &up = constant(e, n, 2);
  if (ix.is_float) refuse(e.f, n, "has float indices");
  if (up.is_float != r.is_float) refuse(e.f, n, "updates differ from the data in type");
  const Shape ds = const_dims(r), is = const_dims(ix);
  if (is.empty() || is.back() < 1 || is.back() > static_cast<int64_t>(ds.size()))
    refuse(e.f, n, "indices " + shape_str(is) + " do not index data " + shape_str(ds));
  const auto k = static_cast<size_t>(is.back());
  int64_t slice = 1;  // the elements one index names
  for (size_t a = k; a < ds.size(); ++a) slice *= ds[a];
  const int64_t count = numel(is) / static_cast<int64_t>(k);
  if (up.size() != count * slice) refuse(e.f, n, "updates hold " + std::to_string(up.size()) + " numbers, not " + std::to_string(count * slice));
  std::vector<float> f = r.is_float ? *r.f : std::vector<float>{};
  for (int64_t j = 0; j < count; ++j) {
    int64_t off = 0;
    for (size_t a = 0; a < k; ++a) {
      int64_t v = ix.i[static_cast<size_t>(j) * k + a];
      if (v < -ds[a] || v >= ds[a]) refuse(e.f, n, "index " + std::to_string(v) + " is out of range for axis " + std::to_string(a) + " of " + shape_str(ds));
      off = off * ds[a] + (v < 0 ? v + ds[a] : v);
    }
    for (int64_t t = 0; t < slice; ++t) {
      const auto dst = static_cast<size_t>(off * slice + t), src = static_cast<size_t>(j * slice + t);
      if (r.is_float) f[dst] = (*up.f)[src];
      else r.i[dst] = up.i[src];
    }
  }
  if (r.is_float) r.f = std::make_shared<std::vector<float>>(std::move(f));
  return r;
}

// ScatterND of constant updates into a tensor of the graph (Swin-V2 zeroes
// the key part of its qkv bias, qkv_bias[C:2C] = 0, on a parameter):
// x * keep + placed, keep 0 where a slice is replaced and 1 elsewhere,
// placed the updates there and 0 elsewhere; the replaced elements pass no
// gradient back.
void scatter_into_tensor(Env& e, const onnx::NodeProto& n) {
  const ValueId x = value(e, n, 0);
  const Shape xs = shape_of(e, x);
  const Const& up = constant(e, n, 2);
  if (!up.is_float) refuse(e.f, n, "scatters integers into a float tensor");
  auto filled = [&](float v) {
    Const c;
    c.dims = xs;
    c.is_float = true;
    c.f = std::make_shared<std::vector<float>>(static_cast<size_t>(numel(xs)), v);
    return c;
  };
  const std::string zeros = n.output(0) + ":zero-updates", keep = n.output(0) + ":keep",
                    placed = n.output(0) + ":placed";
  // placed: the updates at their slices, 0 elsewhere; keep: 1, and 0 at the
  // slices (the same scatter, of zeros into ones).
  Const z = up;
  z.f = std::make_shared<std::vector<float>>(static_cast<size_t>(up.size()), 0.0f);
  e.consts[zeros] = std::move(z);
  onnx::NodeProto m = n;
  m.set_input(2, zeros);
  e.consts[keep] = scattered(e, m, filled(1.0f));
  e.consts[placed] = scattered(e, n, filled(0.0f));
  const std::string layer = layer_of(e, n);
  ValueId y = e.b.g.add1("binary", {x, value_named(e, n, keep)}, {{"kind", std::string("mul")}}, layer);
  bool any = false;
  for (float v : *e.consts.at(placed).f) any = any || v != 0.0f;
  if (any) y = e.b.g.add1("binary", {y, value_named(e, n, placed)}, {{"kind", std::string("add")}}, layer + ".placed");
  bind(e, n, y);
}

// Mod of constants (a window's padding, (w - W % w) % w, in a shifted-window
// attention's shape arithmetic).
void op_mod(Env& e, const onnx::NodeProto& n) {
  if (!fold_arith(e, n)) refuse(e.f, n, "takes a remainder of a tensor of the graph: memfit imports Mod on constants only");
}

// Ops imported only inside a pattern (patterns.cpp): reaching one
// here means the pattern around it did not match.
void op_pattern_only(Env& e, const onnx::NodeProto& n) {
  const std::string& op = n.op_type();
  if (op == "RandomUniformLike" || op == "Less")
    refuse(e.f, n, op + " is imported only as torchvision's stochastic depth: Div(Cast(Less(RandomUniformLike(zeros "
                        "[N, 1, ...]), s)), s) applied by a Mul");
  refuse(e.f, n, op + " is imported only inside GELU: x * 0.5 * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) or "
                 "x * 0.5 * (1 + Erf(x / sqrt(2))); export nn.GELU, or GELU's formula as torch writes it");
}

}  // namespace memfit::models::onnx_import
