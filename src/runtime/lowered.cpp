#include "runtime/lowered.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "runtime/device.hpp"
#include "runtime/mixed.hpp"

namespace memfit {
namespace {

bool any_low_precision(const Graph& g) {
  for (const Value& v : g.values())
    if (v.dtype == DType::bf16 || v.dtype == DType::f16) return true;
  return false;
}

// The set of types among a node's operands, as bits.
uint32_t type_mask(const Graph& g, const Node& n) {
  uint32_t m = 0;
  for (const auto* vs : {&n.inputs, &n.outputs})
    for (ValueId v : *vs) m |= 1u << static_cast<unsigned>(g.value(v).dtype);
  return m;
}

void put(std::string& s, int64_t x) {
  s += std::to_string(x);
  s += ',';
}

void put(std::string& s, double x) {
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  s += std::to_string(bits);
  s += ',';
}

}  // namespace

LoweredGraph::LoweredGraph(const Graph& g, const Device& d, LowerOptions o)
    : g_(g), d_(d), opt_(o) {
  d.prepare(*this);
  if (!o.plain && !d.wide_floats() && any_low_precision(g)) {
    view_graph_ = memfit::f32_view(g);
    LowerOptions vo = o;
    vo.plain = true;
    view_ = std::make_unique<LoweredGraph>(*view_graph_, d, vo);
  }
}

LoweredGraph::~LoweredGraph() = default;

const std::vector<std::vector<NodeId>>& LoweredGraph::readers() const {
  if (readers_.empty()) {
    readers_.resize(g_.num_values());
    for (size_t k = 0; k < g_.num_nodes(); ++k)
      for (ValueId v : g_.node(static_cast<NodeId>(k)).inputs) {
        auto& r = readers_[static_cast<size_t>(v)];
        if (r.empty() || r.back() != static_cast<NodeId>(k)) r.push_back(static_cast<NodeId>(k));
      }
  }
  return readers_;
}

std::string node_signature(const LoweredGraph& lg, NodeId id) {
  const Graph& g = lg.graph();
  const Node& n = g.node(id);
  std::string s = lg.device().name();
  s += '|';
  s += lg.options().plain ? 'p' : '-';
  s += lg.options().blocked_layouts ? 'b' : '-';
  s += '|';
  s += n.op;
  s += '|';
  for (const auto& [k, v] : n.attrs.all()) {
    s += k;
    s += '=';
    s += std::to_string(v.index());
    s += ':';
    if (const auto* i = std::get_if<int64_t>(&v)) put(s, *i);
    else if (const auto* f = std::get_if<double>(&v)) put(s, *f);
    else if (const auto* l = std::get_if<std::vector<int64_t>>(&v))
      for (int64_t x : *l) put(s, x);
    else s += std::get<std::string>(v);
    s += ';';
  }
  // Operands, and the nodes next to them: each input's producer and every
  // reader of an operand.
  std::vector<uint32_t> near;
  for (int side = 0; side < 2; ++side) {
    s += side == 0 ? "|in:" : "|out:";
    for (ValueId v : side == 0 ? n.inputs : n.outputs) {
      const Value& val = g.value(v);
      for (int64_t d : val.shape) put(s, d);
      s += dtype_name(val.dtype);
      s += '/';
      if (side == 0 && val.producer >= 0) near.push_back(type_mask(g, g.node(val.producer)));
    }
  }
  const auto& readers = lg.readers();
  for (const auto* vs : {&n.inputs, &n.outputs})
    for (ValueId v : *vs)
      for (NodeId m : readers[static_cast<size_t>(v)]) near.push_back(type_mask(g, g.node(m)));
  std::sort(near.begin(), near.end());
  near.erase(std::unique(near.begin(), near.end()), near.end());
  s += "|near:";
  for (uint32_t m : near) put(s, static_cast<int64_t>(m));
  if (const DeviceLowering* d = lg.device_lowering()) {
    s += "|device:";
    d->sign(lg, id, s);
  }
  return s;
}

}  // namespace memfit
