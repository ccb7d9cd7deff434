// The lowering context of one graph on one device: everything a kernel
// factory reads besides its own node, computed once per graph (not once per
// factory call) and passed to every factory.
//
// A factory may read its node, its operands' values, the layouts and flags
// held here and the operand types of the nodes next to its operands (max
// pooling pairs its forward and backward kernels that way). plan_for's cache
// key (node_signature) covers exactly these, so a factory that reads more of
// the graph must extend node_signature too.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/layout.hpp"
#include "memfit/graph.hpp"
#include "memfit/runtime.hpp"

namespace memfit {

class Device;

struct LowerOptions {
  // false: every value plain (ExecConfig::blocked_layouts).
  bool blocked_layouts = true;
  // Every value plain whatever blocked_layouts says: the f32 view that
  // converted low-precision nodes are lowered from (its shadows are plain).
  bool plain = false;
};

class LoweredGraph {
 public:
  // Lets the device fill in its part (Device::prepare): the layouts and the
  // bf16 product path; makes the f32 view's context where one is needed.
  LoweredGraph(const Graph& g, const Device& d, LowerOptions o = {});
  ~LoweredGraph();
  LoweredGraph(const LoweredGraph&) = delete;
  LoweredGraph& operator=(const LoweredGraph&) = delete;

  const Graph& graph() const { return g_; }
  const Node& node(NodeId id) const { return g_.node(id); }
  const Device& device() const { return d_; }
  Backend backend() const;
  const LowerOptions& options() const { return opt_; }

  // The layout the fast CPU kernels keep each value in (all Plain on other
  // devices, in an f32 view, and with blocked_layouts off).
  kernels::cpu::Layout layout(ValueId v) const { return layouts_[static_cast<size_t>(v)]; }
  const std::vector<kernels::cpu::Layout>& layouts() const { return layouts_; }
  // Convolutions and linear layers with bf16 activations compute in bf16
  // (true) or in f32 between conversions (false): read once per graph from
  // kernels::cpu::bf16_convs_native() by the CPU device (bf16 graphs only).
  bool bf16_products_native() const { return bf16_native_; }

  // The context of g's f32 view (every bf16/f16 value retyped f32) with
  // plain layouts, which a low-precision node without a kernel of its own
  // types is lowered from (runtime/mixed.hpp); nullptr if g has no
  // low-precision value or the device stores every float wide.
  const LoweredGraph* f32_view() const { return view_.get(); }

  // The nodes reading each value, by value id (built on first use).
  const std::vector<std::vector<NodeId>>& readers() const;

  // For Device::prepare.
  void set_layouts(std::vector<kernels::cpu::Layout> l) { layouts_ = std::move(l); }
  void set_bf16_products_native(bool on) { bf16_native_ = on; }

 private:
  const Graph& g_;
  const Device& d_;
  LowerOptions opt_;
  std::vector<kernels::cpu::Layout> layouts_;
  bool bf16_native_ = true;
  std::unique_ptr<Graph> view_graph_;
  std::unique_ptr<LoweredGraph> view_;
  mutable std::vector<std::vector<NodeId>> readers_;
};

// What a factory's kernel for node id depends on, as a string: device,
// lowering flags, op, attributes, each operand's shape, type and layout, and
// the operand types of the neighbouring nodes (each input's producer, every
// reader of an operand). Equal signatures make kernels with equal scratch
// and heap bytes: plan_for's cache key.
std::string node_signature(const LoweredGraph& lg, NodeId id);

}  // namespace memfit
