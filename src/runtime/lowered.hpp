// The lowering context of one graph on one device: everything a kernel
// factory reads besides its own node, computed once per graph (not once per
// factory call) and passed to every factory.
//
// A factory may read its node, its operands' values, its device's own part
// of the lowering (DeviceLowering: the CPU's layouts and bf16 product path)
// and the operand types of the nodes next to its operands (max pooling pairs
// its forward and backward kernels that way). plan_for's cache key
// (node_signature) covers exactly these, so a factory that reads more of the
// graph must extend node_signature (or its device's sign()) too.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "memfit/graph.hpp"
#include "memfit/runtime.hpp"

namespace memfit {

class Device;
class LoweredGraph;

// A device's own part of one graph's lowering, made by its prepare() and
// read only by its own factories (the CPU's: runtime/lower_cpu/cpu_lowering.hpp).
// Nothing else sees inside it.
class DeviceLowering {
 public:
  virtual ~DeviceLowering() = default;
  // Appends to s what the kernel of node id depends on in this state, for
  // node_signature.
  virtual void sign(const LoweredGraph& lg, NodeId id, std::string& s) const = 0;
};

struct LowerOptions {
  // false: every value plain (ExecConfig::blocked_layouts).
  bool blocked_layouts = true;
  // Every value plain whatever blocked_layouts says: the f32 view that
  // converted low-precision nodes are lowered from (its shadows are plain).
  bool plain = false;
};

class LoweredGraph {
 public:
  // Lets the device fill in its part (Device::prepare); makes the f32
  // view's context where one is needed.
  LoweredGraph(const Graph& g, const Device& d, LowerOptions o = {});
  ~LoweredGraph();
  LoweredGraph(const LoweredGraph&) = delete;
  LoweredGraph& operator=(const LoweredGraph&) = delete;

  const Graph& graph() const { return g_; }
  const Node& node(NodeId id) const { return g_.node(id); }
  const Device& device() const { return d_; }
  const LowerOptions& options() const { return opt_; }

  // The device's own part of this lowering (nullptr where it keeps none).
  const DeviceLowering* device_lowering() const { return state_.get(); }
  // The context of g's f32 view (every bf16/f16 value retyped f32) with
  // plain layouts, which a low-precision node without a kernel of its own
  // types is lowered from (runtime/mixed.hpp); nullptr if g has no
  // low-precision value or the device stores every float wide.
  const LoweredGraph* f32_view() const { return view_.get(); }

  // The nodes reading each value, by value id (built on first use).
  const std::vector<std::vector<NodeId>>& readers() const;

  // For Device::prepare.
  void set_device_lowering(std::unique_ptr<DeviceLowering> s) { state_ = std::move(s); }

 private:
  const Graph& g_;
  const Device& d_;
  LowerOptions opt_;
  std::unique_ptr<DeviceLowering> state_;
  std::unique_ptr<Graph> view_graph_;
  std::unique_ptr<LoweredGraph> view_;
  mutable std::vector<std::vector<NodeId>> readers_;
};

// What a factory's kernel for node id depends on, as a string: device,
// lowering flags, op, attributes, each operand's shape and type, the operand
// types of the neighbouring nodes (each input's producer, every reader of an
// operand), and the device's own part (DeviceLowering::sign: on the CPU
// each operand's layout and the bf16 product path). Equal signatures make kernels with equal scratch
// and heap bytes: plan_for's cache key.
std::string node_signature(const LoweredGraph& lg, NodeId id);

}  // namespace memfit
