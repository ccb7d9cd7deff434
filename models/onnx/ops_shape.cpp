// ONNX shape, indexing and cast nodes: views and copies of graph values,
// or constants computed at import time (models/onnx/convert.hpp).
#include <algorithm>
#include <cmath>
#include <limits>

#include "models/onnx/convert.hpp"

namespace memfit::models::onnx_import {

Shape flatten_shape(Env& e, const onnx::NodeProto& n, const Shape s) {
  const int64_t axis = axis_in(e, n, attr_i(n, "axis", 1), s.size() + 1);  // axis = rank is allowed
  int64_t lead = 1, rest = 1;
  for (size_t k = 0; k < s.size(); ++k) (static_cast<int64_t>(k) < axis ? lead : rest) *= s[k];
  return {lead, rest};
}
void op_flatten(Env& e, const onnx::NodeProto& n) {
  const ValueId x = value(e, n, 0);
  bind(e, n, reshape(e.b, x, flatten_shape(e, n, shape_of(e, x))));
}

// Reshape to a constant shape: 0 keeps the axis, -1 takes the rest. A first
// entry equal to the batch the file was exported with is memfit's batch (a
// traced x.view(16, -1)).
void op_reshape(Env& e, const onnx::NodeProto& n) {
  // allowzero=1 (the dynamo exporter's): a 0 in the shape is an empty axis,
  // which memfit's tensors never have; without one it is the same reshape.
  const bool allowzero = attr_i(n, "allowzero", 0) != 0;
  const bool on_const = foldable(e, n.input(0));  // a shape computation's
  const Shape xs = on_const ? const_dims(constant(e, n, 0)) : shape_of(e, value(e, n, 0));
  Shape to = const_ints(e, n, 1);
  const int64_t exported_batch = e.f.input_dims.empty() ? -1 : e.f.input_dims[0];
  if (!to.empty() && exported_batch > 0 && to[0] == exported_batch && !xs.empty() && xs[0] == e.batch) to[0] = e.batch;
  int64_t known = 1, infer = -1;
  for (size_t k = 0; k < to.size(); ++k) {
    if (to[k] == 0 && allowzero) refuse(e.f, n, "shape " + shape_str(to) + " has an empty axis (allowzero=1): memfit's tensors are never empty");
    if (to[k] == 0) {
      if (k >= xs.size()) refuse(e.f, n, "shape entry 0 at axis " + std::to_string(k) + " past the input's rank");
      to[k] = xs[k];
    }
    if (to[k] == -1) {
      if (infer >= 0) refuse(e.f, n, "shape " + shape_str(to) + " has two -1 entries");
      infer = static_cast<int64_t>(k);
    } else if (to[k] < 1) {
      refuse(e.f, n, "shape entry " + std::to_string(to[k]) + " is not a size");
    } else if (__builtin_mul_overflow(known, to[k], &known)) {
      refuse(e.f, n, "shape " + shape_str(to) + " has more elements than 64-bit integers count");
    }
  }
  if (infer >= 0) to[static_cast<size_t>(infer)] = known > 0 ? numel(xs) / known : 0;
  if (numel(to) != numel(xs)) refuse(e.f, n, "cannot reshape " + shape_str(xs) + " to " + shape_str(to));
  if (on_const) {
    Const c = constant(e, n, 0);
    c.dims = to;
    return bind_const(e, n, std::move(c));
  }
  bind(e, n, reshape(e.b, value(e, n, 0), to));
}

// Transpose: memfit's permute; of a constant (a mask being built), folded.
void op_transpose(Env& e, const onnx::NodeProto& n) {
  const bool on_const = foldable(e, n.input(0));
  const Shape xs = on_const ? const_dims(constant(e, n, 0)) : shape_of(e, value(e, n, 0));
  const size_t r = xs.size();
  Shape reversed;
  for (size_t k = r; k-- > 0;) reversed.push_back(static_cast<int64_t>(k));
  const Shape perm = attr_ints(n, "perm", reversed);
  if (!on_const) return bind(e, n, permute(e.b, value(e, n, 0), perm));
  std::vector<bool> used(r, false);
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(r) || used[static_cast<size_t>(p)]) refuse(e.f, n, "perm " + shape_str(perm) + " is no permutation of " + std::to_string(r) + " axes");
    used[static_cast<size_t>(p)] = true;
  }
  if (perm.size() != r) refuse(e.f, n, "perm " + shape_str(perm) + " is no permutation of " + std::to_string(r) + " axes");
  Shape out(r), stride(r, 1);
  for (size_t a = r; a-- > 1;) stride[a - 1] = stride[a] * xs[a];
  for (size_t a = 0; a < r; ++a) out[a] = xs[static_cast<size_t>(perm[a])];
  std::vector<int64_t> src(static_cast<size_t>(numel(out))), at(r, 0);
  for (size_t k = 0; k < src.size(); ++k) {
    int64_t off = 0;
    for (size_t a = 0; a < r; ++a) off += at[a] * stride[static_cast<size_t>(perm[a])];
    src[k] = off;
    for (size_t a = r; a-- > 0;)
      if (++at[a] < out[a]) break;
      else at[a] = 0;
  }
  bind_const(e, n, gathered(constant(e, n, 0), out, src));
}

void op_concat(Env& e, const onnx::NodeProto& n) {
  bool all_const = true;
  for (int k = 0; k < n.input_size(); ++k) all_const = all_const && is_const(e, n.input(k));
  bool lists = true;  // every input a number or a list: a shape being assembled
  for (int k = 0; k < n.input_size() && all_const; ++k) lists = lists && const_dims(constant(e, n, k)).size() <= 1;
  if (all_const && lists) {
    Const r;
    for (int k = 0; k < n.input_size(); ++k)
      for (int64_t v : const_ints(e, n, k)) r.i.push_back(v);
    r.dims = {static_cast<int64_t>(r.i.size())};
    return bind_const(e, n, std::move(r));
  }
  if (all_const) {  // constants of higher rank (an index buffer given its last axis)
    const Const& first = constant(e, n, 0);
    Shape out = const_dims(first);
    const auto axis = static_cast<size_t>(axis_in(e, n, attr_i(n, "axis", 0), out.size()));
    for (int k = 1; k < n.input_size(); ++k) {
      const Const& c = constant(e, n, k);
      const Shape d = const_dims(c);
      bool fits = d.size() == out.size() && c.is_float == first.is_float;
      for (size_t a = 0; fits && a < d.size(); ++a) fits = a == axis || d[a] == out[a];
      if (!fits) refuse(e.f, n, "concatenates constants of shapes or types that differ off its axis");
      out[axis] += d[axis];
    }
    folded_count(e, n, out);
    int64_t outer = 1, inner = 1;
    for (size_t a = 0; a < axis; ++a) outer *= out[a];
    for (size_t a = axis + 1; a < out.size(); ++a) inner *= out[a];
    Const r;
    r.dims = out;
    r.is_float = first.is_float;
    std::vector<float> f;
    for (int64_t o = 0; o < outer; ++o)
      for (int k = 0; k < n.input_size(); ++k) {
        const Const& c = constant(e, n, k);
        const int64_t block = const_dims(c)[axis] * inner;
        for (int64_t t = 0; t < block; ++t) {
          if (r.is_float) f.push_back((*c.f)[static_cast<size_t>(o * block + t)]);
          else r.i.push_back(c.i[static_cast<size_t>(o * block + t)]);
        }
      }
    if (r.is_float) r.f = std::make_shared<std::vector<float>>(std::move(f));
    return bind_const(e, n, std::move(r));
  }
  std::vector<ValueId> xs;
  for (int k = 0; k < n.input_size(); ++k) xs.push_back(value(e, n, k));
  bind(e, n, concat(e.b, xs, axis_in(e, n, attr_i(n, "axis", 0), shape_of(e, xs[0]).size())));
}

void op_split(Env& e, const onnx::NodeProto& n) {
  const ValueId x = value(e, n, 0);
  const Shape xs = shape_of(e, x);
  const int64_t axis = axis_in(e, n, attr_i(n, "axis", 0), xs.size());
  Shape sizes = has_input(n, 1) ? const_ints(e, n, 1) : attr_ints(n, "split", {});
  if (sizes.empty()) {
    const int64_t parts = n.output_size();
    if (xs[static_cast<size_t>(axis)] % parts) refuse(e.f, n, "axis " + std::to_string(axis) + " does not split evenly");
    sizes.assign(static_cast<size_t>(parts), xs[static_cast<size_t>(axis)] / parts);
  }
  if (static_cast<int>(sizes.size()) != n.output_size()) refuse(e.f, n, "split sizes do not match its outputs");
  int64_t start = 0;
  for (int k = 0; k < n.output_size(); ++k) {
    bind(e, n, slice(e.b, x, axis, start, sizes[static_cast<size_t>(k)]), k);
    start += sizes[static_cast<size_t>(k)];
  }
  if (start != xs[static_cast<size_t>(axis)]) refuse(e.f, n, "split sizes do not add up to the axis");
}

// SplitToSequence(x, split): x cut along the axis into a sequence of
// pieces (torch.chunk and torch.split as the dynamo exporter writes them):
// split a number is each piece's size (the last one smaller if the axis
// does not divide), a list the sizes, none pieces of 1 (without the axis
// when keepdims=0). The pieces are slices of the graph; SequenceAt picks one.
void op_split_to_sequence(Env& e, const onnx::NodeProto& n) {
  if (is_const(e, n.input(0))) refuse(e.f, n, "splits a constant: memfit splits tensors of the graph");
  const ValueId x = value(e, n, 0);
  const Shape xs = shape_of(e, x);
  const int64_t axis = axis_in(e, n, attr_i(n, "axis", 0), xs.size());
  const int64_t len = xs[static_cast<size_t>(axis)];
  Shape sizes;
  bool squeeze = false;
  if (!has_input(n, 1)) {
    sizes.assign(static_cast<size_t>(len), 1);
    squeeze = attr_i(n, "keepdims", 1) == 0;
  } else if (const Const& c = constant(e, n, 1); !c.is_float && c.dims.empty() && c.size() == 1) {
    const int64_t each = c.i[0];
    if (each < 1) refuse(e.f, n, "split " + std::to_string(each) + " is not a size");
    for (int64_t at = 0; at < len; at += each) sizes.push_back(std::min(each, len - at));
  } else {
    sizes = const_ints(e, n, 1);
  }
  if (sizes.size() > 4096) refuse(e.f, n, "makes " + std::to_string(sizes.size()) + " pieces: memfit takes up to 4096");
  std::vector<ValueId> pieces;
  int64_t start = 0;
  for (int64_t size : sizes) {
    if (size < 1 || size > len - start) refuse(e.f, n, "split sizes " + shape_str(sizes) + " do not add up to the axis's " + std::to_string(len));
    ValueId p = slice(e.b, x, axis, start, size);
    if (squeeze) {
      Shape ps = xs;
      ps.erase(ps.begin() + axis);
      p = reshape(e.b, p, ps);
    }
    pieces.push_back(p);
    start += size;
  }
  if (start != len) refuse(e.f, n, "split sizes " + shape_str(sizes) + " do not add up to the axis's " + std::to_string(len));
  e.sequences[n.output(0)] = std::move(pieces);
}

// SequenceAt(sequence, position): a SplitToSequence's piece.
void op_sequence_at(Env& e, const onnx::NodeProto& n) {
  const auto seq = e.sequences.find(n.input(0));
  if (seq == e.sequences.end()) refuse(e.f, n, "reads '" + n.input(0) + "', which is no SplitToSequence's output");
  const double at = const_scalar(e, n, 1);
  const auto count = static_cast<double>(seq->second.size());
  if (!(at >= -count && at < count) || at != std::floor(at))
    refuse(e.f, n, "position " + std::to_string(at) + " is outside a sequence of " + std::to_string(seq->second.size()));
  bind(e, n, seq->second[static_cast<size_t>(at < 0 ? at + count : at)]);
}

// A constant's dims ([size] for a bare list of numbers).
// The box [from, from + len) of a constant, row-major.
Const slice_const(const Const& c, const std::vector<int64_t>& from, const std::vector<int64_t>& len) {
  const Shape dims = const_dims(c);
  Const r;
  r.is_float = c.is_float;
  r.dims = Shape(len.begin(), len.end());
  std::vector<float> f;
  const int64_t total = numel(r.dims);
  std::vector<int64_t> at(dims.size(), 0);
  for (int64_t k = 0; k < total; ++k) {
    int64_t src = 0;
    for (size_t a = 0; a < dims.size(); ++a) src = src * dims[a] + from[a] + at[a];
    if (c.is_float) f.push_back((*c.f)[static_cast<size_t>(src)]);
    else r.i.push_back(c.i[static_cast<size_t>(src)]);
    for (size_t a = dims.size(); a-- > 0;)
      if (++at[a] < len[a]) break;
      else at[a] = 0;
  }
  if (c.is_float) r.f = std::make_shared<std::vector<float>>(std::move(f));
  return r;
}

// Slice with constant starts, ends, axes and steps 1; clamped as ONNX does.
// Slice of a constant with steps, negative ones too (torch.flip of an
// index grid): ONNX's rule, per axis the entries from start towards end by
// step, start clamped to [0, D - 1] and end to [-1, D] for a negative step.
Const const_slice_steps(Env& e, const onnx::NodeProto& n, const Shape& xs, const Shape& starts, const Shape& ends,
                        const Shape& axes, const Shape& steps) {
  std::vector<std::vector<int64_t>> pick(xs.size());
  for (size_t a = 0; a < xs.size(); ++a)
    for (int64_t i = 0; i < xs[a]; ++i) pick[a].push_back(i);
  for (size_t k = 0; k < axes.size(); ++k) {
    const auto a = static_cast<size_t>(axis_in(e, n, axes[k], xs.size()));
    const int64_t D = xs[a], st = steps.empty() ? 1 : steps[k];
    int64_t b = starts[k] < 0 ? starts[k] + D : starts[k], end = ends[k] < 0 ? ends[k] + D : ends[k];
    pick[a].clear();
    if (st > 0) {
      b = std::clamp(b, int64_t(0), D), end = std::clamp(end, int64_t(0), D);
      for (int64_t i = b; i < end; i += st) pick[a].push_back(i);
    } else {
      b = std::clamp(b, int64_t(0), D - 1), end = std::clamp(end, int64_t(-1), D - 1);
      for (int64_t i = b; i > end; i += st) pick[a].push_back(i);
    }
    if (pick[a].empty()) refuse(e.f, n, "the slice of axis " + std::to_string(a) + " is empty");
  }
  Shape out;
  for (const auto& p : pick) out.push_back(static_cast<int64_t>(p.size()));
  folded_count(e, n, out);
  std::vector<int64_t> src(static_cast<size_t>(numel(out))), at(xs.size(), 0);
  for (size_t k = 0; k < src.size(); ++k) {
    int64_t off = 0;
    for (size_t a = 0; a < xs.size(); ++a) off = off * xs[a] + pick[a][static_cast<size_t>(at[a])];
    src[k] = off;
    for (size_t a = xs.size(); a-- > 0;)
      if (++at[a] < out[a]) break;
      else at[a] = 0;
  }
  return gathered(constant(e, n, 0), out, src);
}

void op_slice(Env& e, const onnx::NodeProto& n) {
  const bool on_const = is_const(e, n.input(0));
  const Shape xs = on_const ? const_dims(constant(e, n, 0)) : shape_of(e, value(e, n, 0));
  const Shape starts = has_input(n, 1) ? const_ints(e, n, 1) : attr_ints(n, "starts", {});
  const Shape ends = has_input(n, 2) ? const_ints(e, n, 2) : attr_ints(n, "ends", {});
  Shape axes = has_input(n, 3) ? const_ints(e, n, 3) : attr_ints(n, "axes", {});
  const Shape steps = has_input(n, 4) ? const_ints(e, n, 4) : Shape{};
  if (axes.empty())
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  if (starts.size() != ends.size() || axes.size() != starts.size()) refuse(e.f, n, "starts, ends and axes differ in length");
  if (!steps.empty() && steps.size() != axes.size()) refuse(e.f, n, "steps and axes differ in length");
  // A positive step s (Swin's patch merging, x[:, 0::2, 1::2, :]) on a
  // tensor of the graph whose axis s divides: the axis read as [D / s, s],
  // the slice taking one entry of the second. Other steps are refused.
  std::vector<int64_t> from(xs.size(), 0), len(xs.begin(), xs.end()), step(xs.size(), 1);
  for (size_t k = 0; k < axes.size(); ++k) {
    const auto a = static_cast<size_t>(axis_in(e, n, axes[k], xs.size()));
    step[a] = steps.empty() ? 1 : steps[k];
    if (step[a] == 0) refuse(e.f, n, "has step 0");
    if (on_const && step[a] != 1) continue;  // by const_slice_steps below
    if (step[a] != 1 && (step[a] < 1 || xs[a] % step[a] != 0))
      refuse(e.f, n, "step " + std::to_string(step[a]) + " is not supported (1, or a positive step that divides the axis of a "
                     "tensor of the graph)");
    auto clampi = [&](int64_t v) { return std::clamp(v < 0 ? v + xs[a] : v, int64_t(0), xs[a]); };
    from[a] = clampi(starts[k]);
    len[a] = std::max<int64_t>(0, (clampi(ends[k]) - from[a] + step[a] - 1) / step[a]);
    // An empty piece of a shape is an empty list (torch's unflatten writes
    // shape[:d] + sizes + shape[d + 1:], whose last part is empty at the
    // last axis); memfit's tensors are never empty.
    const bool shape_list = on_const && xs.size() == 1 && !constant(e, n, 0).is_float;
    if (len[a] == 0 && !shape_list) refuse(e.f, n, "the slice of axis " + std::to_string(a) + " is empty");
  }
  if (on_const && std::any_of(step.begin(), step.end(), [](int64_t v) { return v != 1; }))
    return bind_const(e, n, const_slice_steps(e, n, xs, starts, ends, axes, steps));
  if (on_const) return bind_const(e, n, slice_const(constant(e, n, 0), from, len));
  ValueId y = value(e, n, 0);
  for (size_t a = 0; a < xs.size(); ++a) {
    if (step[a] == 1) {
      if (from[a] != 0 || len[a] != xs[a]) y = slice(e.b, y, static_cast<int64_t>(a), from[a], len[a]);
      continue;
    }
    Shape split = shape_of(e, y), out = split;  // axis a as [D / s, s]
    split[a] = xs[a] / step[a];
    split.insert(split.begin() + static_cast<int64_t>(a) + 1, step[a]);
    out[a] = len[a];
    y = reshape(e.b, y, split);
    y = slice(e.b, y, static_cast<int64_t>(a) + 1, from[a] % step[a], 1);
    if (from[a] / step[a] != 0 || len[a] != split[a]) y = slice(e.b, y, static_cast<int64_t>(a), from[a] / step[a], len[a]);
    y = reshape(e.b, y, out);
  }
  bind(e, n, y);
}

// ConstantOfShape(shape): a constant of that shape, every element `value`
// (a one-number tensor; float 0 without it), as torch writes a recurrent
// layer's zero initial state. Its shape is known at import (memfit's shapes
// are static), so it is folded.
void op_constant_of_shape(Env& e, const onnx::NodeProto& n) {
  const Shape dims = const_ints(e, n, 0);
  const int64_t count = folded_count(e, n, dims);
  Const fill;
  if (const auto* a = attr(n, "value")) {
    fill = read_tensor(e.f, a->t(), "node '" + n.name() + "''s value");
    if (fill.size() != 1) refuse(e.f, n, "its value must hold one number, got " + std::to_string(fill.size()));
  } else {
    fill.is_float = true;
    fill.f = std::make_shared<std::vector<float>>(1, 0.0f);
  }
  Const c;
  c.dims = dims;
  c.is_float = fill.is_float;
  if (c.is_float) c.f = std::make_shared<std::vector<float>>(static_cast<size_t>(count), (*fill.f)[0]);
  else c.i.assign(static_cast<size_t>(count), fill.i[0]);
  bind_const(e, n, std::move(c));
}

// Expand(x, shape): x broadcast to shape (numpy's rule, either side's 1s
// stretched). A constant is folded. A tensor of the graph passes where the
// result has its shape; memfit broadcasts inside the op that reads a tensor
// (add_broadcast, binary), so an Expand that grows one is refused.
// Expand: of constants, folded; of a weight or a tensor of the graph, a
// copy over its leading axes (expand_leading: ViT's class token
// [1, 1, D] -> [N, 1, D]), its 1s before the kept axes dropped. Repeating
// any other axis is refused: memfit broadcasts inside the op that reads it.
// Whether every node reading Expand n's output is an elementwise Add, Sub,
// Mul or Div whose other operand, a tensor of the graph already made, has
// the expanded shape: that op broadcasts x itself, so the copy is not made
// (F.normalize's x / norm.expand_as(x)).
bool expand_read_by_broadcast(Env& e, const onnx::NodeProto& n, const Shape& out) {
  bool read = false;
  for (const auto& r : e.f.graph.node()) {
    for (int k = 0; k < r.input_size(); ++k) {
      if (r.input(k) != n.output(0)) continue;
      const std::string& op = r.op_type();
      if ((op != "Add" && op != "Sub" && op != "Mul" && op != "Div") || r.input_size() != 2) return false;
      const auto other = e.values.find(r.input(1 - k));
      if (other == e.values.end() || shape_of(e, other->second) != out) return false;
      read = true;
    }
  }
  return read;
}

void op_expand(Env& e, const onnx::NodeProto& n) {
  const bool on_const = foldable(e, n.input(0));
  const Shape xs = on_const ? const_dims(constant(e, n, 0)) : shape_of(e, value(e, n, 0));
  const Shape out = broadcast_dims(e, n, xs, const_ints(e, n, 1));
  if (!on_const) {
    const ValueId x = value(e, n, 0);
    if (out == xs) return bind(e, n, x);
    if (expand_read_by_broadcast(e, n, out)) return bind(e, n, x);
    // The leading axes that grow must be 1s in x; from the first that
    // does not grow on, x's axes are the output's.
    const size_t lead = out.size() - xs.size();
    size_t keep = 0;
    while (keep < xs.size() && xs[keep] == 1 && out[lead + keep] != 1) ++keep;
    const Shape tail(xs.begin() + static_cast<int64_t>(keep), xs.end());
    if (!std::equal(tail.begin(), tail.end(), out.end() - static_cast<int64_t>(tail.size())) || tail.empty())
      refuse(e.f, n, "expands a tensor of the graph from " + shape_str(xs) + " to " + shape_str(out) +
                     ": memfit repeats a tensor over its leading axes only, and broadcasts inside the op that reads it "
                     "(Add, Mul, ...)");
    return bind(e, n, expand_leading(e.b, tail == xs ? x : reshape(e.b, x, tail), out));
  }
  bind_const(e, n, gathered(constant(e, n, 0), out, broadcast_index(xs, out)));
}

// Gather of one entry along an axis of a tensor of the graph by a constant
// index (h_n[-1] of a recurrent layer, [1, N, H] -> [N, H]): a slice, the
// axis dropped for a scalar index. A 2-d table's row along axis 0 is
// op_gather's. Returns false where this is not that gather.
bool gather_one(Env& e, const onnx::NodeProto& n) {
  if (is_const(e, n.input(0)) || !is_const(e, n.input(1))) return false;
  const Const& c = constant(e, n, 1);
  if (c.is_float || c.size() != 1 || c.dims.size() > 1) return false;
  const ValueId x = value(e, n, 0);
  const Shape xs = shape_of(e, x);
  const auto axis = static_cast<size_t>(axis_in(e, n, attr_i(n, "axis", 0), xs.size()));
  if (xs.size() == 2 && axis == 0) return false;
  const int64_t d = xs[axis];
  int64_t i = c.i[0];
  if (i < -d || i >= d) refuse(e.f, n, "index " + std::to_string(i) + " is out of range for axis " + std::to_string(axis) + " of " + shape_str(xs));
  if (i < 0) i += d;
  const ValueId y = d == 1 ? x : slice(e.b, x, static_cast<int64_t>(axis), i, 1);
  Shape out = xs;
  if (c.dims.empty()) out.erase(out.begin() + static_cast<int64_t>(axis));
  else out[axis] = 1;
  bind(e, n, out == shape_of(e, y) ? y : reshape(e.b, y, out));
  return true;
}

// Gather from a float table by token ids: an embedding (the table a
// parameter). On constants: a shape's entries.
// Rows of a tensor of the graph at constant positions (negative ones from
// the end), shaped [index dims..., row dims...]: gather_rows (Swin's
// relative position bias, its table read by the module's index buffer).
ValueId rows_at(Env& e, const onnx::NodeProto& n, ValueId table, std::vector<int64_t> idx, const Shape& index_dims) {
  const Shape ts = shape_of(e, table);
  if (ts.empty() || idx.empty()) refuse(e.f, n, "gathers no rows, or from a scalar");
  if (idx.size() > (size_t(1) << 24)) refuse(e.f, n, "gathers " + std::to_string(idx.size()) + " rows: memfit takes up to 2^24");
  for (int64_t& i : idx) {
    if (i < -ts[0] || i >= ts[0]) refuse(e.f, n, "gathers row " + std::to_string(i) + " outside the table " + shape_str(ts));
    if (i < 0) i += ts[0];
  }
  const ValueId y = gather_rows(e.b, table, std::move(idx));
  Shape out = index_dims;
  out.insert(out.end(), ts.begin() + 1, ts.end());
  return out == shape_of(e, y) ? y : reshape(e.b, y, out);
}

// GatherND(data, indices) with batch_dims 0 and one index per row
// (indices [..., 1]) of a tensor of the graph at constant indices: its
// rows (the dynamo exporter's form of table[index_buffer]); of constants
// it folds.
void op_gather_nd(Env& e, const onnx::NodeProto& n) {
  if (attr_i(n, "batch_dims", 0) != 0) refuse(e.f, n, "batch_dims " + std::to_string(attr_i(n, "batch_dims", 0)) + " is not supported (0 only)");
  if (!is_const(e, n.input(1))) refuse(e.f, n, "gathers by indices the graph computes: memfit gathers at constant indices only");
  const Const& ix = constant(e, n, 1);
  if (ix.is_float) refuse(e.f, n, "has float indices");
  Shape is = const_dims(ix);
  if (is.empty() || is.back() != 1)
    refuse(e.f, n, "indices " + shape_str(is) + " name more than one axis per entry: memfit gathers rows (indices [..., 1])");
  is.pop_back();
  if (foldable(e, n.input(0))) {
    const Const& d = constant(e, n, 0);
    const Shape ds = const_dims(d);
    if (ds.empty()) refuse(e.f, n, "gathers from a scalar");
    const int64_t row = numel(ds) / ds[0];
    Shape out = is;
    out.insert(out.end(), ds.begin() + 1, ds.end());
    folded_count(e, n, out);
    std::vector<int64_t> src;
    for (int64_t i : ix.i) {
      if (i < -ds[0] || i >= ds[0]) refuse(e.f, n, "gathers row " + std::to_string(i) + " outside " + shape_str(ds));
      for (int64_t t = 0; t < row; ++t) src.push_back((i < 0 ? i + ds[0] : i) * row + t);
    }
    return bind_const(e, n, gathered(d, out, src));
  }
  bind(e, n, rows_at(e, n, value(e, n, 0), ix.i, is));
}

void op_gather(Env& e, const onnx::NodeProto& n) {
  if (is_const(e, n.input(0)) && is_const(e, n.input(1)) && !constant(e, n, 0).is_float) {
    const std::vector<int64_t> v = const_ints(e, n, 0), idx = const_ints(e, n, 1);
    Const r;
    for (int64_t i : idx) {
      if (i < -static_cast<int64_t>(v.size()) || i >= static_cast<int64_t>(v.size())) refuse(e.f, n, "index out of range");
      r.i.push_back(v[static_cast<size_t>(i < 0 ? i + static_cast<int64_t>(v.size()) : i)]);
    }
    r.dims = constant(e, n, 1).dims;
    return bind_const(e, n, std::move(r));
  }
  if (gather_one(e, n)) return;
  if (attr_i(n, "axis", 0) != 0) refuse(e.f, n, "gathers along axis " + std::to_string(attr_i(n, "axis", 0)) + ": memfit gathers table rows only (an embedding)");
  const ValueId table = value(e, n, 0);
  if (is_const(e, n.input(1))) {
    // Rows by constant indices: a position table read at arange(T) is its
    // first T rows (a slice, whose gradient reaches those rows).
    const Const& c = constant(e, n, 1);
    const std::vector<int64_t> idx = const_ints(e, n, 1);
    const Shape ts = shape_of(e, table);
    if (idx.size() > 1 && std::all_of(idx.begin(), idx.end(), [&](int64_t i) { return i == idx[0]; })) {
      // One row for every position (BERT's token types, all 0 when the
      // module is called without them): that row, [1, ..., 1, dim], which
      // the op reading it broadcasts; its gradient reaches that row alone.
      if (ts.size() != 2 || idx[0] < 0 || idx[0] >= ts[0]) refuse(e.f, n, "gathers rows outside the table " + shape_str(ts));
      Shape out(const_dims(c).size(), 1);
      out.push_back(ts[1]);
      return bind(e, n, reshape(e.b, ts[0] == 1 ? table : slice(e.b, table, 0, idx[0], 1), out));
    }
    bool run = !idx.empty();
    for (size_t k = 0; k < idx.size(); ++k) run = run && idx[k] == idx[0] + static_cast<int64_t>(k);
    if (!run) return bind(e, n, rows_at(e, n, table, idx, const_dims(c)));
    // Of a tensor of any rank: its consecutive entries along axis 0 (the
    // dynamo exporter's as_strided of a contiguous view: a flattened tensor
    // read at n * C + c, a reshape).
    if (idx.empty() || idx[0] < 0 || ts.empty() || idx.back() >= ts[0])
      refuse(e.f, n, "gathers rows outside the table " + shape_str(ts));
    ValueId rows = static_cast<int64_t>(idx.size()) == ts[0] ? table : slice(e.b, table, 0, idx[0], static_cast<int64_t>(idx.size()));
    Shape out = const_dims(c);
    out.insert(out.end(), ts.begin() + 1, ts.end());
    return bind(e, n, out == shape_of(e, rows) ? rows : reshape(e.b, rows, out));
  }
  const ValueId ids = value(e, n, 1);
  if (e.b.g.value(ids).dtype != DType::i32 || shape_of(e, table).size() != 2)
    refuse(e.f, n, "memfit gathers rows of a [vocab, dim] table by token ids only (an embedding)");
  bind(e, n, e.b.g.add1("embedding", {ids, table}, {{"dtype", int64_t(DType::f32)}}, layer_of(e, n)));
}

// GatherElements(data, indices, axis) of constants: out[.., i, ..] =
// data[.., indices[.., i, ..], ..] along the axis, out shaped as the
// indices (torch.gather; Hugging Face's BERT gathers its all-zero token
// types by its position ids). Of a tensor of the graph it is refused.
void op_gather_elements(Env& e, const onnx::NodeProto& n) {
  if (!foldable(e, n.input(0)) || !is_const(e, n.input(1)))
    refuse(e.f, n, "gathers from a tensor of the graph: memfit imports GatherElements on constants only (ids or masks "
                   "computed from a module's buffers)");
  const Const &d = constant(e, n, 0), &ix = constant(e, n, 1);
  if (ix.is_float) refuse(e.f, n, "has float indices");
  const Shape ds = const_dims(d), is = const_dims(ix);
  if (ds.size() != is.size() || ds.empty())
    refuse(e.f, n, "indices " + shape_str(is) + " and data " + shape_str(ds) + " differ in rank");
  const auto axis = static_cast<size_t>(axis_in(e, n, attr_i(n, "axis", 0), ds.size()));
  for (size_t a = 0; a < ds.size(); ++a)
    if (a != axis && is[a] > ds[a]) refuse(e.f, n, "indices " + shape_str(is) + " exceed data " + shape_str(ds) + " on axis " + std::to_string(a));
  folded_count(e, n, is);
  std::vector<int64_t> src(static_cast<size_t>(numel(is)));
  std::vector<int64_t> at(is.size(), 0);
  for (size_t k = 0; k < src.size(); ++k) {
    int64_t j = ix.i[k];
    if (j < -ds[axis] || j >= ds[axis]) refuse(e.f, n, "index " + std::to_string(j) + " is out of range for axis " + std::to_string(axis) + " of " + shape_str(ds));
    if (j < 0) j += ds[axis];
    int64_t off = 0;
    for (size_t a = 0; a < ds.size(); ++a) off = off * ds[a] + (a == axis ? j : at[a]);
    src[k] = off;
    for (size_t a = is.size(); a-- > 0;)
      if (++at[a] < is[a]) break;
      else at[a] = 0;
  }
  bind_const(e, n, gathered(d, is, src));
}

// Identity: of a constant, the constant; of a weight (a float initializer
// of several numbers: the dynamo exporter writes a parameter's clone() so,
// Swin-V2's qkv bias) or a tensor of the graph, the same value.
void op_identity(Env& e, const onnx::NodeProto& n) {
  if (foldable(e, n.input(0))) return bind_const(e, n, constant(e, n, 0));
  bind(e, n, value(e, n, 0));
}

void op_constant(Env& e, const onnx::NodeProto& n) {
  if (const auto* a = attr(n, "value")) return bind_const(e, n, read_tensor(e.f, a->t(), "node '" + n.name() + "''s value"));
  Const c;
  if (const auto* a = attr(n, "value_float")) {
    c.is_float = true;
    c.f = std::make_shared<std::vector<float>>(1, a->f());
  } else if (const auto* a = attr(n, "value_floats")) {
    c.is_float = true;
    c.f = std::make_shared<std::vector<float>>(a->floats().begin(), a->floats().end());
    c.dims = {c.size()};
  } else if (const auto* a = attr(n, "value_int")) {
    c.i = {a->i()};
  } else if (const auto* a = attr(n, "value_ints")) {
    c.i.assign(a->ints().begin(), a->ints().end());
    c.dims = {c.size()};
  } else {
    refuse(e.f, n, "memfit reads a Constant's value, value_float(s) or value_int(s) only");
  }
  bind_const(e, n, std::move(c));
}

// Shapes are static in memfit: Shape gives a constant.
void op_shape(Env& e, const onnx::NodeProto& n) {
  const Shape s = is_const(e, n.input(0)) ? constant(e, n, 0).dims : shape_of(e, value(e, n, 0));
  const auto r = static_cast<int64_t>(s.size());
  int64_t lo = attr_i(n, "start", 0), hi = attr_i(n, "end", r);
  lo = std::clamp(lo < 0 ? lo + r : lo, int64_t(0), r);
  hi = std::clamp(hi < 0 ? hi + r : hi, int64_t(0), r);
  Const c;
  c.i.assign(s.begin() + lo, s.begin() + std::max(lo, hi));
  c.dims = {c.size()};
  bind_const(e, n, std::move(c));
}

// Whether every node reading `name` is an AveragePool (and one does).
bool read_by_average_pools(Env& e, const std::string& name) {
  bool any = false;
  for (const auto& m : e.f.graph.node())
    for (const auto& in : m.input())
      if (in == name) {
        if (m.op_type() != "AveragePool") return false;
        any = true;
      }
  return any && name != e.f.output;
}

// x with zeros before and after each axis (pads: ONNX's, all the befores
// then all the afters): a concat with constant buffers of zeros, whose
// gradient to x is its slice (Swin's windows padded to a multiple of
// their size).
ValueId zero_padded(Env& e, const onnx::NodeProto& n, ValueId x, const Shape& pads) {
  const size_t r = pads.size() / 2;
  for (size_t a = 0; a < r; ++a) {
    std::vector<ValueId> parts;
    for (int side = 0; side < 2; ++side) {
      const int64_t p = pads[a + static_cast<size_t>(side) * r];
      if (p == 0) continue;
      Shape zs = shape_of(e, x);
      zs[a] = p;
      if (numel(zs) > (int64_t(1) << 28)) refuse(e.f, n, "pads " + shape_str(zs) + " of zeros: memfit takes up to 2^28");
      const ValueId z = e.b.g.buffer("constant:" + n.output(0) + ":" + std::to_string(a) + (side ? ":after" : ":before"), zs);
      e.b.g.value(z).init = InitSpec{InitSpec::Zeros, 0, nullptr};
      e.b.g.value(z).constant = true;
      parts.push_back(z);
      if (side == 0) parts.push_back(x);
    }
    if (parts.empty()) continue;
    if (pads[a] == 0) parts.insert(parts.begin(), x);
    x = concat(e.b, parts, static_cast<int64_t>(a));
  }
  return x;
}

// Pad: of zero width (torch puts one before every average pool), nothing;
// with zeros on both sides of an image's spatial axes alike and read by
// average pools only, their padding (nn.AvgPool2d(padding=p) as torch
// exports it, counting the padding); any other padding with zeros, a
// concat with zeros. Other pads (negative, or not with zeros) are refused.
void op_pad(Env& e, const onnx::NodeProto& n) {
  const Shape pads = has_input(n, 1) ? const_ints(e, n, 1) : attr_ints(n, "pads", {});
  const ValueId x = value(e, n, 0);
  if (std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; })) return bind(e, n, x);
  const Shape xs = shape_of(e, x);
  const size_t r = xs.size();
  auto give = [&](const std::string& why) {
    refuse(e.f, n, "pads " + shape_str(pads) + ": " + why + "; memfit pads with zeros, or inside Conv and pooling");
  };
  if (pads.size() != 2 * r) give("not two per axis of the input's " + std::to_string(r));
  if (attr_s(n, "mode", "constant") != "constant") give("mode " + attr_s(n, "mode", ""));
  if (has_input(n, 2) && const_scalar(e, n, 2) != 0.0) give("a constant other than 0");
  if (has_input(n, 3)) give("axes given");
  if (std::any_of(pads.begin(), pads.end(), [](int64_t p) { return p < 0; })) give("a negative pad crops");
  // An average pool's own padding: an image's spatial axes, both sides alike.
  bool pool_pad = r == 3 || r == 4;
  Shape spatial;
  for (size_t i = 0; i < r && pool_pad; ++i) {
    pool_pad = i < 2 ? pads[i] == 0 && pads[i + r] == 0 : pads[i] == pads[i + r];
    if (i >= 2) spatial.push_back(pads[i]);
  }
  if (!pool_pad || !read_by_average_pools(e, n.output(0))) return bind(e, n, zero_padded(e, n, x, pads));
  e.pending_pads[n.output(0)] = spatial;
  bind(e, n, x);
}

// Unsqueeze and Squeeze: a reshape (or a constant's new dims).
void op_squeeze(Env& e, const onnx::NodeProto& n) {
  const bool unsq = n.op_type() == "Unsqueeze";
  const bool on_const = is_const(e, n.input(0));
  Shape s = on_const ? constant(e, n, 0).dims : shape_of(e, value(e, n, 0));
  Shape axes = has_input(n, 1) ? const_ints(e, n, 1) : attr_ints(n, "axes", {});
  const size_t rank = unsq ? s.size() + axes.size() : s.size();
  for (int64_t& a : axes) a = axis_in(e, n, a, rank);
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) refuse(e.f, n, "lists an axis twice");
  if (unsq) {
    for (int64_t a : axes) s.insert(s.begin() + a, 1);
  } else if (axes.empty()) {
    std::erase(s, 1);
  } else {
    for (size_t k = axes.size(); k-- > 0;) {
      if (s[static_cast<size_t>(axes[k])] != 1) refuse(e.f, n, "squeezes axis " + std::to_string(axes[k]) + ", which is not 1");
      s.erase(s.begin() + axes[k]);
    }
  }
  if (on_const) {
    Const c = constant(e, n, 0);
    c.dims = s;
    return bind_const(e, n, std::move(c));
  }
  bind(e, n, reshape(e.b, value(e, n, 0), s));
}

// Cast of a shape computation (torch casts sizes to int64 and back).
// A constant as floats or as integers (Cast, CastLike); a float that is no
// 64-bit integer (NaN, infinite, beyond its range) is refused.
Const cast_const(Env& e, const onnx::NodeProto& n, Const c, bool to_float) {
  if (to_float && !c.is_float) {
    c.f = std::make_shared<std::vector<float>>(c.i.begin(), c.i.end());
    c.is_float = true;
    c.i.clear();
  } else if (!to_float && c.is_float) {
    c.i.clear();
    for (float v : *c.f) {
      if (!(std::abs(v) < 9.2e18f)) refuse(e.f, n, "casts " + std::to_string(v) + " to an integer");
      c.i.push_back(static_cast<int64_t>(v));
    }
    c.is_float = false;
    c.f.reset();
  }
  return c;
}

void op_cast(Env& e, const onnx::NodeProto& n) {
  // To float32, a float tensor of the graph stays as it is (memfit's types
  // follow --precision); a model's .float() or .to(dtype) of its own floats.
  if (!is_const(e, n.input(0)) && attr_i(n, "to", 0) == onnx::TensorProto::FLOAT &&
      e.b.g.value(value(e, n, 0)).dtype != DType::i32)
    return bind(e, n, value(e, n, 0));
  if (!is_const(e, n.input(0)))
    refuse(e.f, n, "casts a tensor of the graph: memfit's types follow its precision policy (--precision), not the file");
  const int64_t to = attr_i(n, "to", 0);
  bind_const(e, n, cast_const(e, n, constant(e, n, 0), to == onnx::TensorProto::FLOAT || to == onnx::TensorProto::DOUBLE));
}

// CastLike(x, like): Cast to the type of `like`. A constant cast like a
// float tensor of the graph (the dynamo exporter's zero bias, its scalar
// factors) becomes a float constant; like an integer tensor, an integer
// one. A float tensor of the graph cast like a float stays as it is.
void op_cast_like(Env& e, const onnx::NodeProto& n) {
  // The type of `like`: a constant's, a graph value's, or float for a
  // value a pattern took (stochastic depth's uniform noise, which the
  // dynamo exporter casts its survival probability like).
  bool to_float = true;
  if (is_const(e, n.input(1))) to_float = constant(e, n, 1).is_float;
  else if (e.values.count(n.input(1))) to_float = e.b.g.value(value(e, n, 1)).dtype != DType::i32;
  if (!is_const(e, n.input(0))) {
    if (to_float && e.b.g.value(value(e, n, 0)).dtype != DType::i32) return bind(e, n, value(e, n, 0));
    refuse(e.f, n, "casts a tensor of the graph: memfit's types follow its precision policy (--precision), not the file");
  }
  bind_const(e, n, cast_const(e, n, constant(e, n, 0), to_float));
}

}  // namespace memfit::models::onnx_import
