// embedding(ids, table): rows of a table gathered by integer ids, and its
// gradient embedding_bwd(ids, dy), a scatter-add into the table's rows.
// ids i32 [...] (n ids), table [V, D]: V vocabulary rows of width D;
// y = [..., D]. Attr "dtype" (optional, an int holding a DType): the
// output's storage type, f32 or bf16 (gathered rows rounded once, nearest
// even); default the table's.
//
// The table is not a low_precision_weights input: that trait is for weights
// an op multiplies with, which a bf16 product must meet rounded. A gather
// multiplies nothing, and rounding a row before or after copying it is the
// same, so the output's own rounding is all there is; rounding the whole
// [V, D] table each step (what the trait would make the converting lowering
// do) would cost a pass over the table for no change in any result.
#include <algorithm>

#include "ops/common/op_common.hpp"

namespace memfit {
namespace {

std::vector<ValueMeta> infer_embedding(const Graph& g, const Node& n) {
  if (n.inputs.size() != 2) shape_fail(g, n, "embedding takes ids and a table");
  const Shape& ids = in_shape(g, n, 0);
  const Shape& t = in_shape(g, n, 1);
  if (in_dtype(g, n, 0) != DType::i32 || ids.empty())
    shape_fail(g, n, std::string("ids must be an i32 tensor of rank >= 1, got ") + dtype_name(in_dtype(g, n, 0)) + " " +
                         shape_str(ids));
  if (t.size() != 2 || !is_float(in_dtype(g, n, 1))) shape_fail(g, n, "the table must be a float [vocab, dim] tensor");
  const auto dt = static_cast<DType>(n.attrs.i("dtype", int64_t(in_dtype(g, n, 1))));
  if (dt != DType::f32 && dt != DType::bf16)
    shape_fail(g, n, std::string("the output is stored as f32 or bf16, not ") + dtype_name(dt));
  Shape y = ids;
  y.push_back(t[1]);
  return {{y, dt}};
}

// embedding_bwd(ids, dy[, acc]): [vocab, D] (attr "vocab"), f32 like the
// table. With acc (f32 [vocab, D], another gradient of the same table, such
// as a tied output projection's) the rows are added into acc's values, in
// place when acc dies here: a tied table's gradient is then one buffer, not
// two contributions and their sum.
std::vector<ValueMeta> infer_embedding_bwd(const Graph& g, const Node& n) {
  if (n.inputs.size() != 2 && n.inputs.size() != 3) shape_fail(g, n, "embedding_bwd takes ids, dy and optionally acc");
  const Shape& ids = in_shape(g, n, 0);
  const Shape& dy = in_shape(g, n, 1);
  const int64_t vocab = n.attrs.i("vocab");
  if (in_dtype(g, n, 0) != DType::i32 || dy.size() != ids.size() + 1 || !std::equal(ids.begin(), ids.end(), dy.begin()))
    shape_fail(g, n, "embedding_bwd needs i32 ids [...] and dy [..., D] over the same leading axes");
  if (vocab < 1) shape_fail(g, n, "vocab must be >= 1");
  const Shape out{vocab, dy.back()};
  if (n.inputs.size() == 3 && (in_shape(g, n, 2) != out || in_dtype(g, n, 2) != DType::f32))
    shape_fail(g, n, "acc must be f32 " + shape_str(out) + ", got " + dtype_name(in_dtype(g, n, 2)) + " " +
                         shape_str(in_shape(g, n, 2)));
  return {{out, DType::f32}};
}

std::vector<ValueId> grad_embedding(GradContext& c) {
  std::vector<ValueId> r{kNone, kNone};  // ids are integers: no gradient
  if (c.out_grads[0] == kNone || !c.need[1]) return r;
  const int64_t vocab = c.g.value(c.in(1)).shape[0];
  r[1] = c.emit1("embedding_bwd", {c.in(0), c.out_grads[0]}, {{"vocab", vocab}});
  return r;
}

// gather_rows(table): rows of a table [V, ...] at constant positions
// (attribute "rows", each in [0, V)), y [K, ...] for K rows: a relative
// position bias read by a model's index buffer. Its gradient
// gather_rows_bwd(dy) adds dy's rows back into a zero table (attribute
// "shape"), f32 or the table's gradient type (attribute "dtype").
std::vector<ValueMeta> infer_gather_rows(const Graph& g, const Node& n) {
  const Shape& t = in_shape(g, n, 0);
  const Shape& rows = n.attrs.ints("rows");
  if (t.empty() || !is_float(in_dtype(g, n, 0))) shape_fail(g, n, "gather_rows takes a float table [rows, ...]");
  if (rows.empty()) shape_fail(g, n, "gather_rows needs at least one row");
  for (int64_t r : rows)
    if (r < 0 || r >= t[0]) shape_fail(g, n, "row " + std::to_string(r) + " is outside the table " + shape_str(t));
  Shape y = t;
  y[0] = static_cast<int64_t>(rows.size());
  return {{y, in_dtype(g, n, 0)}};
}

std::vector<ValueMeta> infer_gather_rows_bwd(const Graph& g, const Node& n) {
  const Shape& dy = in_shape(g, n, 0);
  const Shape& t = n.attrs.ints("shape");
  const Shape& rows = n.attrs.ints("rows");
  if (t.empty() || dy.size() != t.size() || dy[0] != static_cast<int64_t>(rows.size()) ||
      !std::equal(t.begin() + 1, t.end(), dy.begin() + 1))
    shape_fail(g, n, "gather_rows_bwd needs dy [rows, ...] of the table " + shape_str(t) + ", got " + shape_str(dy));
  for (int64_t r : rows)
    if (r < 0 || r >= t[0]) shape_fail(g, n, "row " + std::to_string(r) + " is outside the table " + shape_str(t));
  return {{t, static_cast<DType>(n.attrs.i("dtype", int64_t(DType::f32)))}};
}

std::vector<ValueId> grad_gather_rows(GradContext& c) {
  std::vector<ValueId> r{kNone};
  if (c.out_grads[0] == kNone || !c.need[0]) return r;
  Shape rows = c.fwd().attrs.ints("rows");  // a copy: emitting may move the nodes
  r[0] = c.emit1("gather_rows_bwd", {c.out_grads[0]},
                 {{"rows", std::move(rows)}, {"shape", c.g.value(c.in(0)).shape},
                  {"dtype", int64_t(grad_dtype(c.g, c.in(0)))}});
  return r;
}

}  // namespace

void register_embedding_ops() {
  OpTraits rows;
  rows.reference_serves_cpu = true;  // a copy of K rows
  register_op({"gather_rows", infer_gather_rows, grad_gather_rows, rows, {}});
  OpTraits rows_bwd;
  rows_bwd.no_gradient = true;
  rows_bwd.reference_serves_cpu = true;
  register_op({"gather_rows_bwd", infer_gather_rows_bwd, {}, rows_bwd,
               [](const Graph& g, const Node& n) { return static_cast<double>(numel(in_shape(g, n, 0))); }});
  // A gather: no arithmetic, no flops.
  register_op({"embedding", infer_embedding, grad_embedding, {}, {}});
  OpTraits bwd;
  bwd.no_gradient = true;
  bwd.inplace_input = 2;      // acc, where given
  bwd.accumulator_input = 2;  // autodiff folds a tied head's weight gradient into it
  // One addition per element of dy.
  register_op({"embedding_bwd", infer_embedding_bwd, {}, bwd,
               [](const Graph& g, const Node& n) { return static_cast<double>(numel(in_shape(g, n, 1))); }});
}

}  // namespace memfit
