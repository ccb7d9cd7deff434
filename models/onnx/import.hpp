// The ONNX importer's insides, shared by its files: model.cpp
// reads and checks the file, convert.cpp (with ops_*.cpp) converts its nodes into memfit
// ops. Only these files see the protobuf classes (the memfit_onnx library).
#pragma once

#include <onnx/onnx_pb.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "memfit/builder.hpp"
#include "models/model_file.hpp"

namespace memfit::models::onnx_import {

// A tensor known at import time. Floats and integers are kept apart: floats
// are weights or scalar factors, integers are shapes, axes and indices.
struct Const {
  Shape dims;
  bool is_float = false;
  // mutable: the model's release_import frees a read file's weights
  mutable std::shared_ptr<const std::vector<float>> f;
  std::vector<int64_t> i;
  int64_t size() const { return is_float ? static_cast<int64_t>(f->size()) : static_cast<int64_t>(i.size()); }
};

// GELU as torch writes it out: x * 0.5 * (1 + Erf(x / sqrt 2)), or the tanh
// form x * 0.5 * (1 + Tanh(sqrt(2 / pi) * (x + 0.044715 x^3))).
struct GeluMatch {
  std::string x;
  bool tanh = false;
};

// SiLU as torch writes nn.SiLU / F.silu: x * Sigmoid(x) (either order).
struct SiluMatch {
  std::string x;
};

// A MatMul whose operands come through Transposes of their last two axes
// (trans flags instead of copies) and that a bias Add may follow: nn.Linear
// on a 3-d input exports as MatMul(x, Transpose(W)) + b, memfit's linear.
struct MatMulMatch {
  std::string a, b, bias;  // bias: "" for none
  bool trans_a = false, trans_b = false;
  int matmul = -1;         // the MatMul node (its name names the layer)
};

// Attention written out as torch exports it: MatMul(q, kT), a scale (Mul or
// Div by a number), a mask (Where of a constant condition and -inf, or the
// Add of a constant of 0 and large negatives), Softmax
// over the last axis, Dropout, MatMul with v; memfit's fused attention op,
// which never holds the [T, S] probabilities. Heads "bthd": q, k and v come
// from Transposes of [B, T, H, D] tensors (a Linear's output viewed as
// heads) and the result goes through one back, all read in place.
struct AttentionMatch {
  std::string q, k, v;     // bhtd: k is k itself, or kT when k_transposed is false
  bool bthd = false;
  bool k_transposed = true;  // bhtd: k came in through a swap of its last two axes
  int qk = -1, scale = -1, mask = -1, softmax = -1, dropout = -1, av = -1;
  bool mask_inverted = false;  // Where(cond, scores, -inf): masked where cond is false
  // An additive mask, scores + m (Hugging Face's (1 - attention_mask) *
  // min): m's name; the mask node is then that Add.
  std::string mask_add;
  // bthd with q, k, v the three parts of one Split of a [B, T, 3C] tensor
  // (c_attn(x).split(C, dim=2), each viewed as heads): that tensor, read
  // as qkv [B, T, 3, H, D] by the packed attention, with no slice copies
  // forward and no zero-padded gradients backward. split and reshape_q are
  // the Split node and q's Reshape (its shape gives H and D).
  std::string qkv;
  int split = -1, reshape_q = -1;
  std::vector<int> casts;  // Casts to float of the scores or probabilities, skipped
};

// An ONNX RNN, GRU or LSTM node with the Transposes torch's exporter puts
// around it for batch_first=True: X = Transpose(x, [1, 0, 2]), and Y [T, 1,
// N, H] read by Squeeze(axis 1), whose readers are Transposes([1, 0, 2])
// back to [N, T, H] and, between the layers of one module (num_layers > 1),
// the next layer's X. memfit's rnn and lstm ops are batch first: the match
// reads x and binds the batch-first y under the Transposes' outputs and the
// next layer's x, with no copies either way. Each side matches alone; the
// recurrent node itself is converted, the Transposes and Squeeze skipped.
struct RecurrentMatch {
  std::string x;                 // the batch-first input; "" where X is read as it is
  int squeeze = -1;              // Y's Squeeze; -1 where Y is read as it is
  std::vector<int> transposes;   // the Transposes after it
  std::string chain;             // the next layer's batch-first x ("" for none)
  // Where W, R and B are made from the module's parameters only by the
  // Slice/Concat/Unsqueeze nodes of the exporter's gate reordering, and that
  // reordering is the inverse of memfit's: the parameters themselves (by
  // initializer name), read as they are, the reordering nodes skipped.
  std::string w_ih, w_hh, b_ih, b_hh;
};

// Stochastic depth as torchvision writes it (StochasticDepth, mode "row"):
// noise = Div(Cast(Less(RandomUniformLike(zeros [N, 1, ...]), s)), s), each
// sample kept with probability s and scaled by 1/s, read by the Mul that
// applies it. memfit's dropout of a tensor of ones of that shape, p = 1 - s,
// is exactly that noise, drawn from memfit's counter-based generator (and
// ones in evaluation). Keyed by the Div.
struct StochasticDepthMatch {
  int uniform = -1;       // the RandomUniformLike (its input gives the shape)
  double survival = 1.0;  // s
};

struct OnnxFile {
  std::string path;
  onnx::GraphProto graph;                   // nodes and the input/output types; initializers moved out
  std::map<std::string, Const> initializers;
  std::string input, output;
  // A second input, int [N, T] named "attention_mask" (a Hugging Face text
  // model exported with the mask it is called with): 1 for a token, 0 for
  // padding. Its arithmetic ((1 - m) * min added to the scores, or
  // masked_fill where m == 0) becomes the fused attention's padding mask
  // from the data's own mask; "" for none.
  std::string mask_input;
  int64_t opset = 0;                        // of the default domain
  int64_t out_rank = 0;                     // the output's rank
  Shape input_dims;                         // -1: a dynamic axis
  bool tokens = false;                      // an integer input: token ids
  // Patterns of several nodes that become one memfit op (patterns.cpp),
  // each by the index of the node that produces its result; the other nodes
  // of a pattern are in `fused` and are skipped.
  std::map<size_t, GeluMatch> gelu_at;
  std::map<size_t, SiluMatch> silu_at;
  std::map<size_t, MatMulMatch> matmul_at;
  std::map<size_t, AttentionMatch> attention_at;
  // Shape nodes reading an attention's scores, by node: the attention's
  // node in attention_at (the scores' shape comes from its q and k).
  std::map<size_t, size_t> scores_shape_at;
  std::map<size_t, RecurrentMatch> recurrent_at;  // by the RNN, GRU or LSTM node itself
  std::map<size_t, StochasticDepthMatch> depth_at;
  // Float initializers that reach a recurrent layer's W, R or B through the
  // Slice, Concat and Unsqueeze nodes torch writes its gate reordering with:
  // parameters, which those nodes read as tensors of the graph (elsewhere a
  // float initializer they read is a constant, such as an attention mask).
  std::set<std::string> recurrent_weights;
  // The module's buffers, as the package's exporter lists them (metadata
  // "memfit.buffers", one name per line): a float initializer of these that
  // a node reads as a tensor is a constant of the graph, not a parameter
  // (Swin-V2's relative_coords_table, a course Transformer's positional
  // table). Without the list every float initializer read so trains.
  std::set<std::string> buffers;
  std::set<size_t> fused;
  std::vector<std::string> notes;  // Model::notes
  // Set by the model's release_import, which frees the weights; convert
  // refuses a released file.
  mutable bool released = false;
};

[[noreturn]] inline void file_error(const OnnxFile& f, const std::string& msg) { throw ModelFileError(f.path + ": " + msg); }

[[noreturn]] inline void refuse(const OnnxFile& f, const onnx::NodeProto& n, const std::string& msg) {
  file_error(f, "node '" + n.name() + "' (" + n.op_type() + "): " + msg);
}

struct Env {
  const OnnxFile& f;
  Builder& b;
  std::map<std::string, ValueId> values;  // graph values by ONNX name
  std::map<std::string, Const> consts;    // import-time constants by name
  std::set<std::string> layers;           // layer names given out
  int64_t batch = 0;                      // memfit's batch (the input's axis 0)
  const std::set<std::string>* used = nullptr;  // the names some node or the graph's output reads
  // A zero Pad's output (torch writes one before nn.AvgPool2d(padding=p),
  // which counts the padding): its input is bound under the name, and the
  // AveragePool that reads it pads by these (per spatial axis, both sides
  // alike). Any other reader is refused.
  std::map<std::string, Shape> pending_pads;
  // The attention_mask input (OnnxFile::mask_input) is folded as a
  // constant probe: the data's mask is unknown when the graph is built, so
  // the constant is a fixed pattern of 1s and 0s (mask_probe) and every
  // constant computed from it is "tainted". A tainted constant may only
  // become an attention's mask, where each element is checked against the
  // probe (hidden exactly where the probe is 0 at its batch row and key) and
  // the data's mask (mask_value) is given to the attention instead; any other
  // use is refused. Without the data's mask the input is all 1s, untainted.
  ValueId mask_value = kNone;
  std::vector<int64_t> mask_probe;  // [B, T], row-major
  std::set<std::string> tainted;
  // SplitToSequence's outputs: the pieces, which SequenceAt reads (the
  // dynamo exporter's torch.chunk / split); no other op reads a sequence.
  std::map<std::string, std::vector<ValueId>> sequences;
};

using Handler = void (*)(Env&, const onnx::NodeProto&);

// The op table: the ops memfit imports and each one's attributes (any other
// attribute is refused by name, so a setting memfit would ignore cannot pass).
struct OpRule {
  Handler fn;
  std::set<std::string> attrs;
  int min_inputs = 1;  // the inputs its handler reads whatever the opset (a node with fewer is refused)
};
// By ONNX op type.
const std::map<std::string, OpRule>& op_rules();

// The node's attribute of that name, or nullptr.
inline const onnx::AttributeProto* attr(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

// An initializer's or a Constant's tensor; `what` names it in errors.
Const read_tensor(const OnnxFile& f, const onnx::TensorProto& t, const std::string& what);

// Finds the patterns (GeluMatch, MatMulMatch, AttentionMatch) once, when the
// file is read; `scalars` holds the single-number constants by name.
void find_patterns(OnnxFile& f, const std::map<std::string, double>& scalars);

// Replays the file's nodes onto the builder, its input being x (and
// mask, i32 [N, T], the attention_mask input's, if the file has one and the
// data gives it); returns the output's value. Throws ModelFileError naming the node it cannot convert.
ValueId convert(const OnnxFile& f, Builder& b, ValueId x, ValueId mask = kNone);

}  // namespace memfit::models::onnx_import
