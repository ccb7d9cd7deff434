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

void KernelTable::add(const std::string& op, KernelFactory f, KernelCondition takes) {
  factories_[op] = std::move(f);
  if (takes) conditions_[op] = std::move(takes);
  else conditions_.erase(op);
}

void KernelTable::set_layouts(const std::string& op, OperandLayouts l) {
  if (l.any()) layouts_[op] = std::move(l);
  else layouts_.erase(op);
}

const OperandLayouts* KernelTable::layouts(const std::string& op) const {
  auto it = layouts_.find(op);
  return it == layouts_.end() ? nullptr : &it->second;
}

const KernelFactory* KernelTable::find(const std::string& op) const {
  auto it = factories_.find(op);
  return it == factories_.end() ? nullptr : &it->second;
}

bool KernelTable::takes(const Graph& g, const Node& n) const {
  auto it = conditions_.find(n.op);
  return it == conditions_.end() || it->second(g, n);
}

std::vector<std::string> KernelTable::ops() const {
  std::vector<std::string> r;
  for (const auto& [op, f] : factories_) r.push_back(op);
  return r;
}

namespace {

// The tables, filled by the registrations; std::map keeps references stable.
std::map<std::string, KernelTable>& tables() {
  static std::map<std::string, KernelTable> t;
  return t;
}
std::mutex& tables_mutex() {
  static std::mutex m;
  return m;
}
void ensure_kernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_builtin_kernels();
    register_cpu_kernels();
    register_cuda_kernels();
  });
}
void add_to(const std::string& table, const std::string& op, KernelFactory f, KernelCondition takes = {}) {
  std::lock_guard<std::mutex> lock(tables_mutex());
  tables()[table].add(op, std::move(f), std::move(takes));
}

}  // namespace

const KernelTable& kernel_table(const std::string& name) {
  ensure_kernels();
  std::lock_guard<std::mutex> lock(tables_mutex());
  return tables()[name];
}

void register_device_kernel(const std::string& table, const std::string& op, KernelFactory f, KernelCondition takes) {
  ensure_kernels();
  add_to(table, op, std::move(f), std::move(takes));
}

void register_kernel(const std::string& op, KernelFactory f) { add_to("reference", op, std::move(f)); }
void register_cpu_kernel(const std::string& op, KernelFactory f, KernelCondition takes) {
  add_to("cpu", op, std::move(f), std::move(takes));
}
void register_cpu_layouts(const std::string& op, OperandLayouts l) {
  std::lock_guard<std::mutex> lock(tables_mutex());
  tables()["cpu"].set_layouts(op, std::move(l));
}
void register_cuda_kernel(const std::string& op, KernelFactory f) { add_to("cuda", op, std::move(f)); }
const KernelFactory* find_cuda_kernel(const std::string& op) { return kernel_table("cuda").find(op); }
std::vector<std::string> cuda_kernel_ops() { return kernel_table("cuda").ops(); }
bool cpu_kernel_takes(const Graph& g, const Node& n) { return kernel_table("cpu").takes(g, n); }
const KernelFactory* find_reference_kernel(const std::string& op) { return kernel_table("reference").find(op); }
const KernelFactory* find_cpu_kernel(const std::string& op) { return kernel_table("cpu").find(op); }
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
