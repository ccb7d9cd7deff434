// The ONNX converter's insides, shared by its files (models/onnx/convert.cpp
// and ops_*.cpp): the helpers that read a node's attributes, constants and
// inputs, and every op handler the table in convert.cpp names. Only the
// converter includes it.
#pragma once

#include <string>
#include <vector>

#include "models/onnx/import.hpp"

namespace memfit::models::onnx_import {

// The spatial attributes of a Conv or pooling node over 1 or 2 spatial
// axes, as memfit's 2-d ops take them: a 1-d node ([N, C, L]) is a 2-d one
// over [N, C, 1, L] (height 1: kernel, stride, dilation 1, pad 0).
struct Spatial {
  Shape kernel, stride, pad, dilation;  // 2 each
};

// The most elements a folded constant (ConstantOfShape, Expand) may have.
constexpr int64_t kMaxFolded = int64_t(1) << 24;

// convert.cpp
std::string module_path(const std::string& node_name);
int64_t attr_i(const onnx::NodeProto& n, const std::string& name, int64_t dflt);
double attr_f(const onnx::NodeProto& n, const std::string& name, double dflt);
std::string attr_s(const onnx::NodeProto& n, const std::string& name, const std::string& dflt);
Shape attr_ints(const onnx::NodeProto& n, const std::string& name, Shape dflt);
bool has_input(const onnx::NodeProto& n, int k);
bool is_const(Env& e, const std::string& name);
const Const& constant(Env& e, const onnx::NodeProto& n, int k);
std::vector<int64_t> const_ints(Env& e, const onnx::NodeProto& n, int k);
double const_scalar(Env& e, const onnx::NodeProto& n, int k);
ValueId value_named(Env& e, const onnx::NodeProto& n, const std::string& name, bool buffer = false);
ValueId value(Env& e, const onnx::NodeProto& n, int k, bool buffer = false);
Shape shape_of(Env& e, ValueId v);
std::string layer_of(Env& e, const onnx::NodeProto& n);
void bind(Env& e, const onnx::NodeProto& n, ValueId v, int k = 0);
void bind_const(Env& e, const onnx::NodeProto& n, Const c, int k = 0);
void first_output_only(Env& e, const onnx::NodeProto& n, const std::set<std::string>& used);
int64_t axis_in(Env& e, const onnx::NodeProto& n, int64_t axis, size_t rank);
void check_axes(Env& e, const onnx::NodeProto& n, const std::string& name, size_t count);
Spatial spatial(Env& e, const onnx::NodeProto& n, const Shape& in, const Shape& kernel);
ValueId as_2d(Env& e, ValueId x);
ValueId from_2d(Env& e, ValueId y);
bool zero_constant(Env& e, const onnx::NodeProto& n, int k);

// ops_nn.cpp
void op_conv(Env& e, const onnx::NodeProto& n);
void op_gemm(Env& e, const onnx::NodeProto& n);
void op_matmul(Env& e, const onnx::NodeProto& n);
void op_relu(Env& e, const onnx::NodeProto& n);
void op_activation(Env& e, const onnx::NodeProto& n);
void op_clip(Env& e, const onnx::NodeProto& n);
void op_gelu(Env& e, const onnx::NodeProto& n);
void op_pool(Env& e, const onnx::NodeProto& n, bool max);
void op_maxpool(Env& e, const onnx::NodeProto& n);
void op_avgpool(Env& e, const onnx::NodeProto& n);
ValueId reduced(Env& e, const onnx::NodeProto& n, ValueId x, bool sum);
void op_reduce(Env& e, const onnx::NodeProto& n);
void op_reduce_l2(Env& e, const onnx::NodeProto& n);
void op_exp(Env& e, const onnx::NodeProto& n);
void op_global_avg_pool(Env& e, const onnx::NodeProto& n);
void op_batchnorm(Env& e, const onnx::NodeProto& n);
void op_layernorm(Env& e, const onnx::NodeProto& n);
void op_softmax(Env& e, const onnx::NodeProto& n);
void op_log_softmax(Env& e, const onnx::NodeProto& n);
void op_dropout(Env& e, const onnx::NodeProto& n);

// ops_arith.cpp
Shape trailing_of(const Shape a, Shape b);
Shape const_dims(const Const& c);
int64_t folded_count(Env& e, const onnx::NodeProto& n, const Shape& dims);
bool foldable(Env& e, const std::string& name);
double const_at(const Const& c, int64_t k);
std::vector<int64_t> broadcast_index(const Shape& in, const Shape& out);
Const gathered(const Const& c, const Shape& dims, const std::vector<int64_t>& idx);
Shape broadcast_dims(Env& e, const onnx::NodeProto& n, const Shape& a, const Shape& b);
bool fold_arith(Env& e, const onnx::NodeProto& n);
void op_binary(Env& e, const onnx::NodeProto& n);
void op_add(Env& e, const onnx::NodeProto& n);
void op_scale(Env& e, const onnx::NodeProto& n);
void op_range(Env& e, const onnx::NodeProto& n);
void op_equal(Env& e, const onnx::NodeProto& n);
void op_not(Env& e, const onnx::NodeProto& n);
void op_where(Env& e, const onnx::NodeProto& n);
void op_sqrt(Env& e, const onnx::NodeProto& n);
void op_pow(Env& e, const onnx::NodeProto& n);
void op_max_min(Env& e, const onnx::NodeProto& n);
void op_scatter_nd(Env& e, const onnx::NodeProto& n);
Const scattered(Env& e, const onnx::NodeProto& n, Const r);
void scatter_into_tensor(Env& e, const onnx::NodeProto& n);
void op_mod(Env& e, const onnx::NodeProto& n);
void op_pattern_only(Env& e, const onnx::NodeProto& n);

// ops_shape.cpp
Shape flatten_shape(Env& e, const onnx::NodeProto& n, const Shape s);
void op_flatten(Env& e, const onnx::NodeProto& n);
void op_reshape(Env& e, const onnx::NodeProto& n);
void op_transpose(Env& e, const onnx::NodeProto& n);
void op_concat(Env& e, const onnx::NodeProto& n);
void op_split(Env& e, const onnx::NodeProto& n);
void op_split_to_sequence(Env& e, const onnx::NodeProto& n);
void op_sequence_at(Env& e, const onnx::NodeProto& n);
Const slice_const(const Const& c, const std::vector<int64_t>& from, const std::vector<int64_t>& len);
Const const_slice_steps(Env& e, const onnx::NodeProto& n, const Shape& xs, const Shape& starts, const Shape& ends, const Shape& axes, const Shape& steps);
void op_slice(Env& e, const onnx::NodeProto& n);
void op_constant_of_shape(Env& e, const onnx::NodeProto& n);
bool expand_read_by_broadcast(Env& e, const onnx::NodeProto& n, const Shape& out);
void op_expand(Env& e, const onnx::NodeProto& n);
bool gather_one(Env& e, const onnx::NodeProto& n);
ValueId rows_at(Env& e, const onnx::NodeProto& n, ValueId table, std::vector<int64_t> idx, const Shape& index_dims);
void op_gather_nd(Env& e, const onnx::NodeProto& n);
void op_gather(Env& e, const onnx::NodeProto& n);
void op_gather_elements(Env& e, const onnx::NodeProto& n);
void op_identity(Env& e, const onnx::NodeProto& n);
void op_constant(Env& e, const onnx::NodeProto& n);
void op_shape(Env& e, const onnx::NodeProto& n);
bool read_by_average_pools(Env& e, const std::string& name);
ValueId zero_padded(Env& e, const onnx::NodeProto& n, ValueId x, const Shape& pads);
void op_pad(Env& e, const onnx::NodeProto& n);
void op_squeeze(Env& e, const onnx::NodeProto& n);
Const cast_const(Env& e, const onnx::NodeProto& n, Const c, bool to_float);
void op_cast(Env& e, const onnx::NodeProto& n);
void op_cast_like(Env& e, const onnx::NodeProto& n);

// ops_recurrent.cpp
ValueId gate_rows(Env& e, ValueId v, int64_t H, const std::vector<int64_t>& blocks);
std::vector<int64_t> ints_ahead(Env& e, const onnx::NodeProto& n, const std::string& name);
void zero_state(Env& e, const onnx::NodeProto& n, int k, const std::string& what);
std::string joined(const std::vector<std::string>& v);
void emit_recurrent(Env& e, const onnx::NodeProto& n, const RecurrentMatch& m);
void op_recurrent(Env& e, const onnx::NodeProto& n);

// ops_fused.cpp
void emit_stochastic_depth(Env& e, const onnx::NodeProto& n, const StochasticDepthMatch& m);
void emit_gelu(Env& e, const onnx::NodeProto& n, const GeluMatch& m);
void emit_silu(Env& e, const onnx::NodeProto& n, const SiluMatch& m);
void emit_matmul(Env& e, const onnx::NodeProto& n, const MatMulMatch& m);
Shape scores_shape(Env& e, const onnx::NodeProto& n, const AttentionMatch& m);
ValueId packed_qkv(Env& e, const AttentionMatch& m);
void unpack_heads(Env& e, const AttentionMatch& m);
void emit_attention(Env& e, const onnx::NodeProto& n, const AttentionMatch& m);
AttentionOpts attention_opts(Env& e, const AttentionMatch& m, int64_t T, int64_t S);

// A pointwise function of a constant, folded (f in double, checked by
// `check`, which refuses what it cannot take); of a tensor of the graph,
// the activation `kind`.
template <class F, class Check>
void unary(Env& e, const onnx::NodeProto& n, const char* kind, F f, Check check) {
  if (!foldable(e, n.input(0))) return bind(e, n, activation(e.b, value(e, n, 0), kind));
  const Const& c = constant(e, n, 0);
  Const r;
  r.dims = c.dims;
  r.is_float = true;
  auto out = std::make_shared<std::vector<float>>(static_cast<size_t>(c.size()));
  for (int64_t k = 0; k < c.size(); ++k) {
    const double v = const_at(c, k);
    check(v);
    (*out)[static_cast<size_t>(k)] = static_cast<float>(f(v));
  }
  r.f = std::move(out);
  bind_const(e, n, std::move(r));
}

}  // namespace memfit::models::onnx_import
