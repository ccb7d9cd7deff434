#include "memfit/graph.hpp"

#include <sstream>

#include "memfit/op_registry.hpp"

namespace memfit {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i32: return 4;
    case DType::u8: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::u8: return "u8";
  }
  return "?";
}

const char* vclass_name(VClass c) {
  switch (c) {
    case VClass::Transient: return "transient";
    case VClass::Input: return "input";
    case VClass::Param: return "param";
    case VClass::Buffer: return "buffer";
    case VClass::ParamGrad: return "grad";
    case VClass::OptState: return "optstate";
  }
  return "?";
}

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s)
    if (__builtin_mul_overflow(n, d, &n)) throw GraphError("the shape " + shape_str(s) + " has more elements than 64-bit integers count");
  return n;
}

std::string shape_str(const Shape& s) {
  std::ostringstream o;
  o << '[';
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << ']';
  return o.str();
}

namespace {
template <class T>
const T& get_attr(const std::map<std::string, AttrValue>& m, const std::string& k) {
  auto it = m.find(k);
  if (it == m.end()) throw GraphError("missing attribute '" + k + "'");
  if (auto p = std::get_if<T>(&it->second)) return *p;
  throw GraphError("attribute '" + k + "' has the wrong type");
}
}  // namespace

int64_t Attrs::i(const std::string& k) const { return get_attr<int64_t>(m_, k); }
int64_t Attrs::i(const std::string& k, int64_t d) const { return has(k) ? i(k) : d; }
double Attrs::f(const std::string& k) const {
  auto it = m_.find(k);
  if (it != m_.end())
    if (auto p = std::get_if<int64_t>(&it->second)) return static_cast<double>(*p);
  return get_attr<double>(m_, k);
}
double Attrs::f(const std::string& k, double d) const { return has(k) ? f(k) : d; }
const std::vector<int64_t>& Attrs::ints(const std::string& k) const {
  return get_attr<std::vector<int64_t>>(m_, k);
}
const std::string& Attrs::s(const std::string& k) const { return get_attr<std::string>(m_, k); }

ValueId Graph::add_value(Value v) {
  // Element counts (and bytes: up to 8 per element) must fit int64, so that
  // no size computed from a shape later overflows.
  constexpr int64_t kMaxElements = int64_t(1) << 59;
  int64_t elems = 1;
  for (auto d : v.shape) {
    if (d <= 0) throw GraphError("value '" + v.name + "' has a non-positive dimension " + shape_str(v.shape));
    if (__builtin_mul_overflow(elems, d, &elems) || elems > kMaxElements)
      throw GraphError("value '" + v.name + "' of shape " + shape_str(v.shape) + " has more than 2^59 elements");
  }
  ValueId id = static_cast<ValueId>(values_.size());
  if (!v.name.empty()) {
    if (by_name_.count(v.name) && v.cls != VClass::Transient)
      throw GraphError("duplicate name '" + v.name + "'");
    by_name_.emplace(v.name, id);
  }
  values_.push_back(std::move(v));
  return id;
}

std::vector<ValueId> Graph::add_node(const std::string& op, std::vector<ValueId> inputs, Attrs attrs,
                                     const std::string& layer, Phase phase, NodeId fwd) {
  const OpDef& def = op_def(op);
  for (ValueId v : inputs)
    if (v < 0 || static_cast<size_t>(v) >= values_.size())
      throw GraphError("layer '" + layer + "' (" + op + "): input value id out of range");
  Node n;
  n.op = op;
  n.attrs = std::move(attrs);
  n.inputs = std::move(inputs);
  n.layer = layer;
  n.phase = phase;
  n.fwd = fwd;
  std::vector<ValueMeta> metas = def.infer(*this, n);
  NodeId id = static_cast<NodeId>(nodes_.size());
  for (size_t i = 0; i < metas.size(); ++i) {
    Value v;
    v.name = layer;
    v.name += ':';
    v.name += op;
    if (metas.size() > 1) {
      v.name += ':';
      v.name += std::to_string(i);
    }
    v.shape = metas[i].shape;
    v.dtype = metas[i].dtype;
    v.producer = id;
    n.outputs.push_back(add_value(std::move(v)));
  }
  nodes_.push_back(std::move(n));
  return nodes_.back().outputs;
}

ValueId Graph::input(const std::string& name, Shape shape, DType dt) {
  Value v;
  v.name = name;
  v.shape = std::move(shape);
  v.dtype = dt;
  v.cls = VClass::Input;
  return add_value(std::move(v));
}

ValueId Graph::param(const std::string& name, Shape shape, bool trainable, DType dt) {
  Value v;
  v.name = name;
  v.shape = std::move(shape);
  v.dtype = dt == DType::f32 && v.shape.size() >= 2 ? weight_storage : dt;
  v.cls = VClass::Param;
  v.trainable = trainable;
  return add_value(std::move(v));
}

ValueId Graph::buffer(const std::string& name, Shape shape, DType dt) {
  Value v;
  v.name = name;
  v.shape = std::move(shape);
  v.dtype = dt;
  v.cls = VClass::Buffer;
  return add_value(std::move(v));
}

void Graph::reorder(const std::vector<NodeId>& order) {
  if (order.size() != nodes_.size()) throw GraphError("reorder: wrong number of nodes");
  std::vector<NodeId> new_id(nodes_.size(), -1);
  for (size_t i = 0; i < order.size(); ++i) {
    NodeId o = order[i];
    if (o < 0 || static_cast<size_t>(o) >= nodes_.size() || new_id[static_cast<size_t>(o)] >= 0)
      throw GraphError("reorder: not a permutation");
    new_id[static_cast<size_t>(o)] = static_cast<NodeId>(i);
  }
  std::vector<Node> nn;
  nn.reserve(nodes_.size());
  for (NodeId o : order) nn.push_back(std::move(nodes_[static_cast<size_t>(o)]));
  nodes_ = std::move(nn);
  for (auto& v : values_)
    if (v.producer >= 0) v.producer = new_id[static_cast<size_t>(v.producer)];
  for (auto& n : nodes_)
    if (n.fwd >= 0) n.fwd = new_id[static_cast<size_t>(n.fwd)];
  for (size_t i = 0; i < nodes_.size(); ++i)
    for (ValueId v : nodes_[i].inputs)
      if (values_[static_cast<size_t>(v)].producer >= static_cast<NodeId>(i))
        throw GraphError("reorder: node " + nodes_[i].op + " @" + nodes_[i].layer + " runs before its input '" +
                         values_[static_cast<size_t>(v)].name + "' is made");
}

ValueId Graph::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? kNone : it->second;
}

std::vector<ValueId> Graph::params() const {
  std::vector<ValueId> r;
  for (size_t i = 0; i < values_.size(); ++i)
    if (values_[i].cls == VClass::Param) r.push_back(static_cast<ValueId>(i));
  return r;
}
std::vector<ValueId> Graph::trainable_params() const {
  std::vector<ValueId> r;
  for (size_t i = 0; i < values_.size(); ++i)
    if (values_[i].cls == VClass::Param && values_[i].trainable) r.push_back(static_cast<ValueId>(i));
  return r;
}
std::vector<ValueId> Graph::buffers() const {
  std::vector<ValueId> r;
  for (size_t i = 0; i < values_.size(); ++i)
    if (values_[i].cls == VClass::Buffer) r.push_back(static_cast<ValueId>(i));
  return r;
}
std::vector<ValueId> Graph::inputs() const {
  std::vector<ValueId> r;
  for (size_t i = 0; i < values_.size(); ++i)
    if (values_[i].cls == VClass::Input) r.push_back(static_cast<ValueId>(i));
  return r;
}

std::string describe(const Graph& g, const Node& n) {
  std::ostringstream o;
  o << n.op << " @" << (n.layer.empty() ? "?" : n.layer) << " (";
  for (size_t i = 0; i < n.inputs.size(); ++i)
    o << (i ? ", " : "") << shape_str(g.value(n.inputs[i]).shape);
  o << ')';
  return o.str();
}

}  // namespace memfit
