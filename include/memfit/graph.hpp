// memfit graph IR: values (shape + dtype + role), nodes (op + attributes +
// inputs/outputs), one Graph that holds forward, loss, backward and update.
//
// The node list is the schedule: nodes are appended in a valid execution
// order (builder appends forward, autodiff appends backward, the optimizer
// appends its update), and every later layer (planner, runtime) walks it in
// that order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

namespace memfit {

enum class DType : uint8_t { f32, bf16, f16, i32, u8 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
inline bool is_float(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

using Shape = std::vector<int64_t>;
int64_t numel(const Shape& s);
std::string shape_str(const Shape& s);

using ValueId = int32_t;
using NodeId = int32_t;
constexpr ValueId kNone = -1;

// What a value is for; decides where the planner puts it.
//  Transient : activations, activation gradients, saved values -> liveness arena
//  Input     : data fed each step (images, labels)             -> data buffers
//  Param     : trainable or frozen weights                      -> flat params
//  Buffer    : non-trainable state (batch-norm running stats)   -> flat params
//  ParamGrad : gradient of a trainable parameter                -> flat grads
//  OptState  : optimizer moments                                -> flat opt state
enum class VClass : uint8_t { Transient, Input, Param, Buffer, ParamGrad, OptState };
const char* vclass_name(VClass c);
inline bool is_persistent(VClass c) { return c != VClass::Transient; }

enum class Phase : uint8_t { Forward, Backward, Update };

// How a parameter or buffer is filled before training (seeded).
struct InitSpec {
  enum Kind : uint8_t { None, Zeros, Ones, Uniform, Given } kind = None;
  double bound = 0;  // Uniform: U(-bound, bound)
  // Given: the initial values themselves, row-major f32 (an imported model's
  // weights: models/onnx/model.cpp). Shared, as every graph built from one
  // model (the budget search builds several) starts from the same weights.
  std::shared_ptr<const std::vector<float>> values;
};

struct Value {
  std::string name;      // e.g. "layer1.0.conv1.weight" or "layer1.0.conv1:out"
  Shape shape;
  DType dtype = DType::f32;
  VClass cls = VClass::Transient;
  bool trainable = false;   // parameters only
  bool is_output = false;   // kept readable after the step (logits, loss)
  bool is_loss = false;
  // Parameters the model exempts from weight decay when the optimizer's
  // decay_bias_and_norm is false (biases, norm scales and shifts: set by the
  // builder; a model may set it on any parameter of its own).
  bool no_weight_decay = false;
  // A buffer of values the model itself computes from constants (an
  // imported file's shifted-window mask): filled at init, never written,
  // neither saved nor loaded with the weights.
  bool constant = false;
  NodeId producer = -1;     // -1 for inputs, parameters, buffers, opt state
  // Kept in the offload tier (a file) rather than in its arena: the step
  // reads it through tier_load nodes into planned buffers and writes it
  // back with tier_store (the tier pass, memfit/tier.hpp). Persistent only.
  bool tiered = false;
  ValueId grad = kNone;     // gradient value, once autodiff made one
  ValueId grad_of = kNone;  // for a gradient: the value it is the gradient of
  InitSpec init;
  size_t bytes() const { return static_cast<size_t>(numel(shape)) * dtype_size(dtype); }
};

using AttrValue = std::variant<int64_t, double, std::vector<int64_t>, std::string>;

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<const std::string, AttrValue>> init) : m_(init) {}
  Attrs& set(const std::string& k, AttrValue v) { m_[k] = std::move(v); return *this; }
  bool has(const std::string& k) const { return m_.count(k) != 0; }
  int64_t i(const std::string& k) const;
  int64_t i(const std::string& k, int64_t dflt) const;
  double f(const std::string& k) const;
  double f(const std::string& k, double dflt) const;
  const std::vector<int64_t>& ints(const std::string& k) const;
  const std::string& s(const std::string& k) const;
  const std::map<std::string, AttrValue>& all() const { return m_; }

 private:
  std::map<std::string, AttrValue> m_;
};

struct Node {
  std::string op;       // registered op name: "conv2d", "conv2d_bwd_data", ...
  Attrs attrs;
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  std::string layer;    // the model layer this node belongs to ("layer1.0.conv1")
  Phase phase = Phase::Forward;
  NodeId fwd = -1;      // for backward nodes: the forward node they differentiate
};

// A model mistake found while building or inferring shapes. The message names
// the layer and the shapes involved.
struct GraphError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ValueMeta {
  Shape shape;
  DType dtype = DType::f32;
};

class Graph {
 public:
  ValueId add_value(Value v);
  // Appends a node; runs the op's shape inference, creates the output values
  // (class Transient unless told otherwise) and returns their ids.
  std::vector<ValueId> add_node(const std::string& op, std::vector<ValueId> inputs, Attrs attrs,
                                const std::string& layer, Phase phase = Phase::Forward,
                                NodeId fwd = -1);

  // Convenience for single-output ops.
  ValueId add1(const std::string& op, std::vector<ValueId> inputs, Attrs attrs,
               const std::string& layer, Phase phase = Phase::Forward, NodeId fwd = -1) {
    return add_node(op, std::move(inputs), std::move(attrs), layer, phase, fwd).at(0);
  }

  ValueId input(const std::string& name, Shape shape, DType dt = DType::f32);
  ValueId param(const std::string& name, Shape shape, bool trainable = true, DType dt = DType::f32);
  ValueId buffer(const std::string& name, Shape shape, DType dt = DType::f32);

  Value& value(ValueId v) { return values_.at(static_cast<size_t>(v)); }
  const Value& value(ValueId v) const { return values_.at(static_cast<size_t>(v)); }
  Node& node(NodeId n) { return nodes_.at(static_cast<size_t>(n)); }
  const Node& node(NodeId n) const { return nodes_.at(static_cast<size_t>(n)); }
  const std::vector<Value>& values() const { return values_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  size_t num_values() const { return values_.size(); }
  size_t num_nodes() const { return nodes_.size(); }

  // Permutes the schedule: order[i] is the old id of the node that runs i-th.
  // Throws GraphError if the order runs a node before a producer of its inputs.
  void reorder(const std::vector<NodeId>& order);

  // Lookup by name; kNone if absent.
  ValueId find(const std::string& name) const;
  // Parameters (trainable and frozen) and buffers in creation order.
  std::vector<ValueId> params() const;
  std::vector<ValueId> trainable_params() const;
  std::vector<ValueId> buffers() const;
  std::vector<ValueId> inputs() const;

  // Free-form model metadata (training flag, model name).
  bool training = true;
  std::string model_name;
  // Storage of the weights (--master-weights): a float parameter of rank >= 2
  // made with param()'s default type is stored in this type (f32 or bf16).
  // Vectors (biases, norm scales) stay f32: they are few bytes, and norms
  // and biases are where a rounded weight costs the most accuracy.
  DType weight_storage = DType::f32;

 private:
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::map<std::string, ValueId> by_name_;
};

std::string describe(const Graph& g, const Node& n);

}  // namespace memfit
