// The ONNX importer's insides, shared by its two files: onnx_model.cpp
// reads and checks the file, onnx_ops.cpp converts its nodes into memfit
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
  std::shared_ptr<const std::vector<float>> f;
  std::vector<int64_t> i;
  int64_t size() const { return is_float ? static_cast<int64_t>(f->size()) : static_cast<int64_t>(i.size()); }
};

struct OnnxFile {
  std::string path;
  onnx::GraphProto graph;                   // nodes and the input/output types; initializers moved out
  std::map<std::string, Const> initializers;
  std::string input, output;
  int64_t opset = 0;                        // of the default domain
  int64_t out_rank = 0;                     // the output's rank
  Shape input_dims;                         // -1: a dynamic axis
  bool tokens = false;                      // an integer input: token ids
  // The exact GELU torch exports, x * 0.5 * (1 + Erf(x / sqrt 2)): the node
  // index that produces its result -> x's name, and the nodes it replaces.
  std::map<size_t, std::string> gelu_at;
  std::set<size_t> fused;
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
};

using Handler = void (*)(Env&, const onnx::NodeProto&);

// The op table: the ops memfit imports and each one's attributes (any other
// attribute is refused by name, so a setting memfit would ignore cannot pass).
struct OpRule {
  Handler fn;
  std::set<std::string> attrs;
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

// Replays the file's nodes onto the builder, its input being x; returns the
// output's value. Throws ModelFileError naming the node it cannot convert.
ValueId convert(const OnnxFile& f, Builder& b, ValueId x);

}  // namespace memfit::models::onnx_import
