#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "kernels/bf16.hpp"
#include "kernels/kernel.hpp"
#include "memfit/op_registry.hpp"
#include "memfit/rng.hpp"
#include "memfit/runtime.hpp"
#include "runtime/device.hpp"
#include "runtime/lowered.hpp"
#include "runtime/tier_store.hpp"

namespace memfit {

namespace {
constexpr uint8_t kGuard = 0xA5;
// Elements per chunk of a converting copy through a host buffer.
constexpr size_t kCopyChunk = 1024;
}  // namespace

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::Cpu: return "cpu";
    case Backend::Reference: return "reference";
    case Backend::Reference64: return "reference64";
    case Backend::Cuda: return "cuda";
  }
  return "?";
}

std::vector<size_t> value_storage_bytes(const Graph& g, Backend b) { return value_storage_bytes(g, device_for(b)); }

std::vector<size_t> value_storage_bytes(const Graph& g, const Device& d) {
  std::vector<size_t> r(g.num_values());
  for (size_t v = 0; v < r.size(); ++v) {
    const Value& val = g.value(static_cast<ValueId>(v));
    r[v] = static_cast<size_t>(numel(val.shape)) * d.elem_size(val.dtype);
  }
  return r;
}

namespace {

LowerOptions lower_options(const ExecConfig& cfg) {
  LowerOptions o;
  o.blocked_layouts = cfg.blocked_layouts;
  return o;
}

Plan plan_with(const Graph& g, const ExecConfig& cfg, const std::vector<size_t>& scratch, size_t heap_bytes) {
  const std::vector<size_t> bytes = value_storage_bytes(g, device_of(cfg));
  Plan plan = make_plan(g, bytes, scratch, cfg.plan);
  plan.library_heap_bytes = std::max(plan.library_heap_bytes, heap_bytes);
  bool verify = cfg.verify;
#ifndef NDEBUG
  verify = true;
#endif
  if (verify) {
    std::string err = verify_plan(g, plan, bytes, scratch);
    if (!err.empty()) throw std::logic_error("memory plan failed verification: " + err);
  }
  return plan;
}

}  // namespace

KernelSizes::Bytes KernelSizes::get(const std::string& signature, const std::function<Bytes()>& make) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = bytes_.find(signature);
    if (it != bytes_.end()) return it->second;
  }
  const Bytes b = make();
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_.emplace(signature, b).first->second;
}

size_t KernelSizes::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_.size();
}

Plan plan_for(const Graph& g, const ExecConfig& cfg) {
  const Device& dev = device_of(cfg);
  const LoweredGraph lg(g, dev, lower_options(cfg));
  std::vector<size_t> scratch(g.num_nodes(), 0);
  size_t heap = 0;
  for (size_t k = 0; k < g.num_nodes(); ++k) {
    const NodeId id = static_cast<NodeId>(k);
    auto make = [&] {
      KernelSizes::Bytes b;
      if (const std::unique_ptr<kernels::Kernel> kern = dev.make_kernel(lg, id))
        b = {kern->scratch_bytes(), kern->heap_bytes()};
      return b;
    };
    const KernelSizes::Bytes b = cfg.kernel_sizes ? cfg.kernel_sizes->get(node_signature(lg, id), make) : make();
    scratch[k] = b.scratch;
    heap = std::max(heap, b.heap);
  }
  return plan_with(g, cfg, scratch, heap);
}

Executor::Executor(const Graph& g, ExecConfig cfg) : g_(g), cfg_(cfg), dev_(&device_of(cfg)) {
  kernels_.resize(g.num_nodes());
  std::vector<size_t> scratch(g.num_nodes(), 0);
  size_t heap = 0;
  {
    const LoweredGraph lg(g, *dev_, lower_options(cfg));
    for (size_t k = 0; k < g.num_nodes(); ++k) {
      kernels_[k] = dev_->make_kernel(lg, static_cast<NodeId>(k));
      if (!kernels_[k]) continue;
      scratch[k] = kernels_[k]->scratch_bytes();
      heap = std::max(heap, kernels_[k]->heap_bytes());
    }
  }
#ifndef NDEBUG
  cfg_.verify = true;
#endif
  plan_ = plan_with(g, cfg_, scratch, heap);
  arenas_.assign(kNumArenas, nullptr);
  owned_.assign(kNumArenas, false);
  if (!cfg_.defer_allocation) allocate();
}

void Executor::borrow(Arena a, ExecConfig::Borrowed mem) {
  if (allocated_) throw std::logic_error("borrow() after allocate()");
  cfg_.borrow[static_cast<size_t>(a)] = mem;
}

void Executor::share_tier(std::shared_ptr<TierStore> tier) {
  if (allocated_) throw std::logic_error("share_tier() after allocate()");
  if (tier) cfg_.tier = std::move(tier);
}

void Executor::keep_tier(std::string reopen) {
  if (allocated_) throw std::logic_error("keep_tier() after allocate()");
  cfg_.tier_keep = true;
  cfg_.tier_reopen = std::move(reopen);
}

void Executor::allocate() {
  if (allocated_) return;
  allocated_ = true;
  const Graph& g = g_;
  const ExecConfig& cfg = cfg_;
  if (cfg_.plan.guard_bytes && !dev_->host_addressable())
    throw std::invalid_argument(std::string("guard-byte mode needs host-addressable memory; device '") + dev_->name() +
                                "' has none");
  const size_t align = dev_->arena_alignment();
  for (size_t a = 0; a < kNumArenas; ++a) {
    size_t bytes = (plan_.arena_bytes[a] + align - 1) / align * align;
    if (bytes == 0 || !in_memory(static_cast<Arena>(a))) continue;
    if (cfg.borrow[a].ptr) {
      if (cfg.borrow[a].bytes < plan_.arena_bytes[a])
        throw std::logic_error(std::string("borrowed ") + arena_name(static_cast<Arena>(a)) + " arena is too small");
      arenas_[a] = static_cast<std::byte*>(cfg.borrow[a].ptr);
      continue;
    }
    owned_[a] = true;
    arenas_[a] = static_cast<std::byte*>(dev_->allocate(bytes));
    if (a != static_cast<size_t>(Arena::Transient)) dev_->fill(arenas_[a], 0, bytes);
  }
  make_tier();
  if (cfg_.plan.guard_bytes) {
    fill_guards();
    // The guards each node must leave intact: after the sets of its outputs
    // and after its scratch.
    node_guards_.assign(g.num_nodes(), {});
    for (size_t k = 0; k < g.num_nodes(); ++k) {
      auto& list = node_guards_[k];
      for (ValueId v : g.node(static_cast<NodeId>(k)).outputs) {
        const ValueId r = plan_.values[static_cast<size_t>(v)].root;
        const Placement& p = plan_.values[static_cast<size_t>(r)];
        if (p.arena != Arena::Transient || p.bytes == 0) continue;
        bool seen = false;
        for (const Guard& gd : list) seen = seen || gd.offset == p.offset + p.bytes;
        if (!seen) list.push_back({p.offset + p.bytes, r});
      }
      if (plan_.scratch[k].bytes) list.push_back({plan_.scratch[k].offset + plan_.scratch[k].bytes, kNone});
    }
  }
  for (size_t k = 0; k < g.num_nodes(); ++k) {
    if (!kernels_[k]) continue;
    const Node& n = g.node(static_cast<NodeId>(k));
    std::vector<void*> in, out;
    for (ValueId v : n.inputs) in.push_back(data(v));
    for (ValueId v : n.outputs) out.push_back(data(v));
    void* s = plan_.scratch[k].bytes ? arenas_[0] + plan_.scratch[k].offset : nullptr;
    kernels_[k]->bind(std::move(in), std::move(out), s);
  }
}

Executor::~Executor() {
  kernels_.clear();
  for (size_t a = 0; a < arenas_.size(); ++a)
    if (owned_[a]) dev_->free(arenas_[a]);
}

void Executor::make_tier() {
  std::vector<TierStore::Block> blocks;
  std::vector<bool> written(g_.num_values(), false);  // by a tier_store node
  for (size_t n = 0; n < g_.num_nodes(); ++n) {
    const Node& node = g_.node(static_cast<NodeId>(n));
    if (op_def(node.op).traits.tier_io == OpTraits::TierIo::Store)
      written[static_cast<size_t>(plan_.values.at(static_cast<size_t>(node.inputs.at(1))).root)] = true;
  }
  for (size_t v = 0; v < g_.num_values(); ++v)
    if (plan_.values[v].arena == Arena::Tier && plan_.values[v].root == static_cast<ValueId>(v))
      blocks.push_back({g_.value(static_cast<ValueId>(v)).name, plan_.values[v].bytes, written[v]});
  if (blocks.empty()) return;
  if (!cfg_.tier) {
    cfg_.tier = std::make_shared<TierStore>(cfg_.tier_dir, blocks, TierStore::Keep{cfg_.tier_keep, cfg_.tier_reopen});
    return;
  }
  for (const auto& b : blocks)
    if (!cfg_.tier->has(b.name) || cfg_.tier->block_bytes(b.name) != b.bytes)
      throw std::logic_error("the tier store lent to this executor does not hold '" + b.name + "' as " +
                             std::to_string(b.bytes) + " bytes");
}

void Executor::write_range(ValueId v, size_t at, const void* src, size_t bytes) {
  if (at > value_bytes(v) || bytes > value_bytes(v) - at)
    throw std::invalid_argument("write_range past the end of '" + g_.value(v).name + "'");
  const Placement& p = plan_.values.at(static_cast<size_t>(v));
  if (p.arena == Arena::Tier) return cfg_.tier->write_range(g_.value(p.root).name, at, src, bytes);
  dev_->copy_to_device(static_cast<std::byte*>(data(v)) + at, src, bytes);
}

void Executor::read_range(ValueId v, size_t at, void* dst, size_t bytes) {
  if (at > value_bytes(v) || bytes > value_bytes(v) - at)
    throw std::invalid_argument("read_range past the end of '" + g_.value(v).name + "'");
  const Placement& p = plan_.values.at(static_cast<size_t>(v));
  if (p.arena == Arena::Tier) return cfg_.tier->read_range(g_.value(p.root).name, at, dst, bytes);
  dev_->copy_to_host(dst, static_cast<const std::byte*>(data(v)) + at, bytes);
}

namespace {
std::byte* arena_range(const Plan& plan, const std::vector<std::byte*>& arenas, Arena a, size_t at, size_t bytes,
                       const char* what) {
  const size_t i = static_cast<size_t>(a);
  if (!arenas[i]) throw std::logic_error(std::string(what) + " of an arena not allocated");
  if (at > plan.arena_bytes[i] || bytes > plan.arena_bytes[i] - at)
    throw std::invalid_argument(std::string(what) + " past the end of arena " + std::to_string(i));
  return arenas[i] + at;
}
}  // namespace

void Executor::write_arena(Arena a, size_t at, const void* src, size_t bytes) {
  if (bytes) dev_->copy_to_device(arena_range(plan_, arenas_, a, at, bytes, "write_arena"), src, bytes);
}

void Executor::read_arena(Arena a, size_t at, void* dst, size_t bytes) {
  if (bytes) dev_->copy_to_host(dst, arena_range(plan_, arenas_, a, at, bytes, "read_arena"), bytes);
}

ExecConfig::Borrowed Executor::arena(Arena a) const {
  return {arenas_[static_cast<size_t>(a)], plan_.arena_bytes[static_cast<size_t>(a)]};
}

size_t Executor::elem_size(ValueId v) const { return dev_->elem_size(g_.value(v).dtype); }

void* Executor::data(ValueId v) {
  const Placement& p = plan_.values.at(static_cast<size_t>(v));
  std::byte* base = arenas_[static_cast<size_t>(p.arena)];
  return base ? base + p.offset : nullptr;
}

size_t Executor::value_bytes(ValueId v) const {
  return static_cast<size_t>(numel(g_.value(v).shape)) * elem_size(v);
}

namespace {
void* checked_buffer(Executor& ex, ValueId v, size_t bytes, const char* what) {
  if (!ex.allocated()) throw std::logic_error(std::string(what) + " before allocate()");
  if (bytes != ex.value_bytes(v))
    throw std::invalid_argument(std::string(what) + " of '" + ex.graph().value(v).name + "': " + std::to_string(bytes) +
                                " bytes given, the value holds " + std::to_string(ex.value_bytes(v)));
  return ex.data(v);
}
}  // namespace

void Executor::feed(ValueId v, const void* src, size_t bytes) {
  checked_buffer(*this, v, bytes, "feed");
  write_range(v, 0, src, bytes);
}

void Executor::fetch(ValueId v, void* dst, size_t bytes) {
  checked_buffer(*this, v, bytes, "fetch");
  read_range(v, 0, dst, bytes);
}

double Executor::fetch_scalar(ValueId v) {
  const Value& val = g_.value(v);
  if (numel(val.shape) != 1) throw std::invalid_argument("fetch_scalar of '" + val.name + "', which is not a scalar");
  const size_t n = value_bytes(v);
  const void* p = checked_buffer(*this, v, n, "fetch_scalar");
  if (val.dtype != DType::f32 && val.dtype != DType::i32)
    throw std::invalid_argument("fetch_scalar of '" + val.name + "': not an f32 or i32 value");
  alignas(8) unsigned char buf[8];
  dev_->copy_to_host(buf, p, n);
  if (val.dtype == DType::i32) {
    int32_t i;
    std::memcpy(&i, buf, 4);
    return i;
  }
  if (n == 8) {
    double d;
    std::memcpy(&d, buf, 8);
    return d;
  }
  float f;
  std::memcpy(&f, buf, 4);
  return f;
}

size_t Executor::arena_bytes() const {
  size_t t = 0;
  for (size_t a = 0; a < kNumArenas; ++a)
    if (owned_[a]) t += plan_.arena_bytes[a];
  return t;
}

std::vector<size_t> Executor::node_scratch() const {
  std::vector<size_t> r;
  for (auto& s : plan_.scratch) r.push_back(s.bytes);
  return r;
}

void Executor::write_f32(ValueId v, const float* src) {
  const size_t n = static_cast<size_t>(numel(g_.value(v).shape));
  if (g_.value(v).dtype != DType::f32) throw std::runtime_error("write_f32 on a non-f32 value");
  if (elem_size(v) != 8) return write_range(v, 0, src, n * 4);
  double buf[kCopyChunk];
  for (size_t i = 0; i < n; i += kCopyChunk) {
    const size_t m = std::min(kCopyChunk, n - i);
    for (size_t j = 0; j < m; ++j) buf[j] = src[i + j];
    write_range(v, i * 8, buf, m * 8);
  }
}

void Executor::read_f32(ValueId v, float* dst) {
  const size_t n = static_cast<size_t>(numel(g_.value(v).shape));
  if (g_.value(v).dtype != DType::f32) throw std::runtime_error("read_f32 on a non-f32 value");
  if (elem_size(v) != 8) return read_range(v, 0, dst, n * 4);
  double buf[kCopyChunk];
  for (size_t i = 0; i < n; i += kCopyChunk) {
    const size_t m = std::min(kCopyChunk, n - i);
    read_range(v, i * 8, buf, m * 8);
    for (size_t j = 0; j < m; ++j) dst[i + j] = static_cast<float>(buf[j]);
  }
}

void Executor::init_params(uint64_t seed, bool tiered_too) {
  for (size_t v = 0; v < g_.num_values(); ++v) {
    const Value& val = g_.value(static_cast<ValueId>(v));
    if (!tiered_too && plan_.values[v].arena == Arena::Tier) continue;
    if (val.cls == VClass::ParamGrad || val.cls == VClass::OptState) {
      if (plan_.values[v].arena == Arena::Tier) cfg_.tier->fill(val.name, 0);
      else dev_->fill(data(static_cast<ValueId>(v)), 0, plan_.values[v].bytes);
      continue;
    }
    if (val.cls != VClass::Param && val.cls != VClass::Buffer) continue;
    // bf16 master weights: drawn in f32, stored rounded to nearest.
    const bool half = val.dtype == DType::bf16;
    if (val.dtype != DType::f32 && !half) throw std::runtime_error("init_params: '" + val.name + "' is not f32 or bf16");
    // Generated in chunks through a small host buffer: a temporary copy of
    // the largest parameter would be memory outside the plan.
    const size_t n = static_cast<size_t>(numel(val.shape));
    const bool wide = elem_size(static_cast<ValueId>(v)) == 8;
    const ValueId id = static_cast<ValueId>(v);
    const uint64_t key = rng::stream_key(seed, rng::name_hash(val.name), 0);
    if (val.init.kind == InitSpec::Given && (!val.init.values || val.init.values->size() != n))
      throw std::runtime_error("init_params: '" + val.name + "' has " +
                               std::to_string(val.init.values ? val.init.values->size() : 0) +
                               " initial values for its " + std::to_string(n) + " elements");
    // A tiered value is written in pieces of the store's whole buffer (a
    // smaller piece would make the store read and rewrite its sector).
    const bool tiered = plan_.values[v].arena == Arena::Tier;
    const size_t chunk = tiered ? kTierIoBufferBytes / 8 : kCopyChunk;
    float f_stack[kCopyChunk];
    double d_stack[kCopyChunk];
    kernels::bf16_t h_stack[kCopyChunk];
    std::vector<float> f_heap(tiered ? chunk : 0);
    std::vector<double> d_heap(tiered && wide ? chunk : 0);
    std::vector<kernels::bf16_t> h_heap(tiered && half ? chunk : 0);
    float* f = tiered ? f_heap.data() : f_stack;
    double* d = tiered && wide ? d_heap.data() : d_stack;
    kernels::bf16_t* h = tiered && half ? h_heap.data() : h_stack;
    for (size_t i0 = 0; i0 < n; i0 += chunk) {
      const size_t m = std::min(chunk, n - i0);
      for (size_t j = 0; j < m; ++j) {
        const size_t i = i0 + j;
        float x = 0.0f;
        switch (val.init.kind) {
          case InitSpec::None:
          case InitSpec::Zeros: x = 0.0f; break;
          case InitSpec::Ones: x = 1.0f; break;
          case InitSpec::Uniform: x = rng::uniform_sym(key, i, static_cast<float>(val.init.bound)); break;
          case InitSpec::Given: x = (*val.init.values)[i]; break;
        }
        if (wide) d[j] = x;
        else f[j] = x;
      }
      if (wide) {
        write_range(id, i0 * 8, d, m * 8);
      } else if (half) {
        kernels::f32_to_bf16(f, h, m);
        write_range(id, i0 * 2, h, m * 2);
      } else {
        write_range(id, i0 * 4, f, m * 4);
      }
    }
  }
}

void Executor::run(const kernels::StepContext& ctx) { run_nodes(0, kernels_.size(), ctx); }

void Executor::set_profiling(bool on) {
  profiling_ = on;
  if (on && node_seconds_.size() != kernels_.size()) node_seconds_.assign(kernels_.size(), 0.0);
}

const char* Executor::kernel_name(size_t k) const { return kernels_.at(k) ? kernels_[k]->name() : ""; }

void Executor::run_timed(size_t begin, size_t end, const kernels::StepContext& ctx) {
  using Clock = std::chrono::steady_clock;
  for (size_t k = begin; k < end; ++k) {
    if (!kernels_[k]) continue;
    dev_->synchronize();
    const auto t0 = Clock::now();
    kernels_[k]->run(ctx);
    dev_->synchronize();
    node_seconds_[k] += std::chrono::duration<double>(Clock::now() - t0).count();
  }
}

bool Executor::runs_library_gemm() const {
  for (const auto& k : kernels_)
    if (k && k->runs_library_gemm()) return true;
  return false;
}

namespace {
// A step that stops on an error may leave copies queued on the tier's I/O
// thread into or out of buffers that are about to be reused or freed: they
// are dropped (and the one running waited for) before the error goes on.
struct CancelTierOnError {
  TierStore* tier;
  int uncaught = std::uncaught_exceptions();
  ~CancelTierOnError() {
    if (tier && std::uncaught_exceptions() > uncaught) tier->cancel();
  }
};
}  // namespace

void Executor::run_nodes(size_t begin, size_t end, const kernels::StepContext& step) {
  kernels::StepContext ctx = step;
  if (cfg_.tier) ctx.tier = cfg_.tier.get();
  ctx.queue = dev_->queue();
  const CancelTierOnError cancel_on_error{cfg_.tier.get()};
  if (profiling_ && !cfg_.plan.guard_bytes) return run_timed(begin, end, ctx);
  if (!cfg_.plan.guard_bytes) {
    for (size_t k = begin; k < end; ++k)
      if (kernels_[k]) kernels_[k]->run(ctx);
    return;
  }
  // Guard mode: before a node runs, the guards after the buffers it writes
  // (its outputs' sets and its scratch) get the pattern; after it, they must
  // still hold it. Only then is a changed guard this node's doing: a guard
  // of a buffer that is not live may legitimately lie under another one.
  const size_t gb = cfg_.plan.guard_bytes;
  for (size_t k = begin; k < end; ++k) {
    if (!kernels_[k]) continue;
    for (const Guard& gd : node_guards_[k]) std::memset(arenas_[0] + gd.offset, kGuard, gb);
    kernels_[k]->run(ctx);
    if (!guard_error_.empty()) continue;
    for (const Guard& gd : node_guards_[k])
      if (!guard_intact(gd.offset)) {
        guard_error_ = (gd.value == kNone ? std::string("scratch") : "'" + g_.value(gd.value).name + "'") +
                       " (written by " + describe(g_, g_.node(static_cast<NodeId>(k))) + ")";
        break;
      }
  }
}

void Executor::poison(uint8_t byte) {
  for (Arena a : {Arena::Transient, Arena::Grads})
    if (arenas_[static_cast<size_t>(a)])
      dev_->fill(arenas_[static_cast<size_t>(a)], byte, plan_.arena_bytes[static_cast<size_t>(a)]);
  if (cfg_.plan.guard_bytes) fill_guards();
}

void Executor::fill_guards() {
  std::byte* t = arenas_[0];
  if (!t) return;
  // Fill the whole transient arena; data regions are overwritten by kernels,
  // guard regions must keep the pattern.
  std::memset(t, kGuard, plan_.arena_bytes[0]);
}

bool Executor::guard_intact(size_t offset) const {
  const auto* p = reinterpret_cast<const uint8_t*>(arenas_[0] + offset);
  for (size_t i = 0; i < cfg_.plan.guard_bytes; ++i)
    if (p[i] != kGuard) return false;
  return true;
}

bool Executor::guards_intact() const { return broken_guard().empty(); }

std::string Executor::broken_guard() const {
  if (!cfg_.plan.guard_bytes || !arenas_[0]) return {};
  if (!guard_error_.empty()) return guard_error_;
  // Buffers kept after the step (outputs) must keep their guards between steps.
  const int32_t end = static_cast<int32_t>(g_.num_nodes());
  for (size_t v = 0; v < plan_.values.size(); ++v) {
    const Placement& p = plan_.values[v];
    if (p.arena != Arena::Transient || p.root != static_cast<ValueId>(v) || p.bytes == 0 || p.last < end) continue;
    if (!guard_intact(p.offset + p.bytes)) return "'" + g_.value(static_cast<ValueId>(v)).name + "' (after the step)";
  }
  return {};
}

}  // namespace memfit
