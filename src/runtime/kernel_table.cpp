#include "runtime/kernel_table.hpp"

#include <map>
#include <mutex>
#include <stdexcept>

#include "memfit/op_registry.hpp"
#include "runtime/device.hpp"
#include "runtime/mixed.hpp"

namespace memfit {

void register_builtin_kernels();  // runtime/register_kernels.cpp
void register_cpu_kernels();      // runtime/register_kernels.cpp
void register_cuda_kernels();     // runtime/register_kernels.cpp

namespace {
std::map<std::string, KernelFactory>& ktable() {
  static std::map<std::string, KernelFactory> t;
  return t;
}
std::map<std::string, KernelFactory>& cpu_table() {
  static std::map<std::string, KernelFactory> t;
  return t;
}
std::map<std::string, KernelFactory>& cuda_table() {
  static std::map<std::string, KernelFactory> t;
  return t;
}
std::map<std::string, KernelCondition>& cpu_conditions() {
  static std::map<std::string, KernelCondition> t;
  return t;
}
void ensure_kernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_builtin_kernels();
    register_cpu_kernels();
    register_cuda_kernels();
  });
}
const KernelFactory* find_in(std::map<std::string, KernelFactory>& t, const std::string& op) {
  ensure_kernels();
  auto it = t.find(op);
  return it == t.end() ? nullptr : &it->second;
}
}  // namespace

void register_kernel(const std::string& op, KernelFactory f) { ktable()[op] = std::move(f); }
void register_cpu_kernel(const std::string& op, KernelFactory f, KernelCondition takes) {
  cpu_table()[op] = std::move(f);
  if (takes) cpu_conditions()[op] = std::move(takes);
}
void register_cuda_kernel(const std::string& op, KernelFactory f) { cuda_table()[op] = std::move(f); }
const KernelFactory* find_cuda_kernel(const std::string& op) { return find_in(cuda_table(), op); }
std::vector<std::string> cuda_kernel_ops() {
  ensure_kernels();
  std::vector<std::string> r;
  for (const auto& [op, f] : cuda_table()) r.push_back(op);
  return r;
}
bool cpu_kernel_takes(const Graph& g, const Node& n) {
  ensure_kernels();
  auto it = cpu_conditions().find(n.op);
  return it == cpu_conditions().end() || it->second(g, n);
}
const KernelFactory* find_reference_kernel(const std::string& op) { return find_in(ktable(), op); }
const KernelFactory* find_cpu_kernel(const std::string& op) { return find_in(cpu_table(), op); }
bool has_cpu_kernel(const std::string& op) { return find_cpu_kernel(op) != nullptr; }
bool has_reference_kernel(const std::string& op) { return find_reference_kernel(op) != nullptr; }

std::unique_ptr<kernels::Kernel> make_reference_kernel(const LoweredGraph& lg, NodeId id, const KernelFactory* fast) {
  const Graph& g = lg.graph();
  const Node& n = g.node(id);
  const KernelFactory* ref = find_reference_kernel(n.op);
  if (!ref) throw std::runtime_error("no kernel for op '" + n.op + "'");
  if (lg.device().wide_floats() || op_def(n.op).traits.converts_types || low_precision_type(g, n) == DType::f32)
    return (*ref)(lg, id);
  // A low-precision node without a kernel of its own for its types: the f32
  // kernel for the f32 view of the node, wrapped in conversions.
  const LoweredGraph* view = lg.f32_view();
  if (!view) throw std::logic_error("lowering context of a low-precision graph without its f32 view");
  std::unique_ptr<kernels::Kernel> inner;
  if (fast) inner = (*fast)(*view, id);
  if (!inner) inner = (*ref)(*view, id);
  return wrap_low_precision(g, n, std::move(inner));
}

std::unique_ptr<kernels::Kernel> make_kernel(const Graph& g, const Node& n, Backend b) {
  const Device& d = device_for(b);
  LoweredGraph lg(g, d);
  return d.make_kernel(lg, static_cast<NodeId>(&n - g.nodes().data()));
}

}  // namespace memfit
