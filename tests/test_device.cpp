// Devices and the lowering context (runtime/device.hpp, runtime/lowered.hpp):
// the context's layouts are the CPU lowering's choice, computed once per
// graph; the blocked-layout switch is a config option; the CPU device's
// arenas are aligned; plan_for (no executor, cached kernels) gives the plan
// an executor makes, byte for byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "memfit/runtime.hpp"
#include "kernels/cpu/engine.hpp"
#include "runtime/device.hpp"
#include "runtime/kernel_table.hpp"
#include "runtime/lower_cpu/cpu_lowering.hpp"
#include "runtime/lower_cpu/layout.hpp"
#include "runtime/lowered.hpp"
#include "compile/step_graph.hpp"

using namespace memfit;
using kernels::cpu::Layout;

namespace {

std::unique_ptr<train::StepGraph> step(const std::string& model, DType precision, const std::string& recompute = "none") {
  train::StepSpec s;
  s.model = model;
  s.batch = 8;
  if (model == "resnet18") {
    s.channels = 3;
    s.height = s.width = 32;
  }
  s.optimizer.kind = "adam";
  s.precision = precision;
  s.recompute = recompute;
  return train::build_step_graph(s);
}

size_t count(const std::vector<Layout>& l, Layout x) {
  size_t n = 0;
  for (Layout e : l) n += e == x;
  return n;
}

void expect_same_plan(const Plan& a, const Plan& b, const std::string& what) {
  ASSERT_EQ(a.values.size(), b.values.size()) << what;
  for (size_t v = 0; v < a.values.size(); ++v) {
    const Placement &p = a.values[v], &q = b.values[v];
    EXPECT_TRUE(p.arena == q.arena && p.offset == q.offset && p.bytes == q.bytes && p.root == q.root &&
                p.first == q.first && p.last == q.last)
        << what << ": value " << v;
  }
  ASSERT_EQ(a.scratch.size(), b.scratch.size()) << what;
  for (size_t k = 0; k < a.scratch.size(); ++k) {
    EXPECT_EQ(a.scratch[k].offset, b.scratch[k].offset) << what << ": node " << k;
    EXPECT_EQ(a.scratch[k].bytes, b.scratch[k].bytes) << what << ": node " << k;
  }
  EXPECT_EQ(a.arena_bytes, b.arena_bytes) << what;
  EXPECT_EQ(a.naive_transient_bytes, b.naive_transient_bytes) << what;
  EXPECT_EQ(a.peak_live_bytes, b.peak_live_bytes) << what;
  EXPECT_EQ(a.library_heap_bytes, b.library_heap_bytes) << what;
  EXPECT_EQ(a.total_bytes(), b.total_bytes()) << what;
}

}  // namespace

TEST(Device, BackendsMapToDevices) {
  EXPECT_STREQ(device_for(Backend::Cpu).name(), "cpu");
  EXPECT_STREQ(device_for(Backend::Reference).name(), "reference");
  EXPECT_STREQ(device_for(Backend::Reference64).name(), "reference64");
  for (Backend b : {Backend::Cpu, Backend::Reference, Backend::Reference64}) {
    EXPECT_STREQ(device_for(b).name(), backend_name(b));  // the shorthand names a device
    EXPECT_TRUE(device_for(b).host_addressable());
  }
  EXPECT_EQ(device_for(Backend::Cpu).elem_size(DType::bf16), 2u);
  EXPECT_EQ(device_for(Backend::Reference).elem_size(DType::f32), 4u);
  EXPECT_EQ(device_for(Backend::Reference64).elem_size(DType::f32), 8u);
  EXPECT_EQ(device_for(Backend::Reference64).elem_size(DType::bf16), 8u);
  EXPECT_EQ(device_for(Backend::Reference64).elem_size(DType::i32), 4u);
}

TEST(Device, CpuArenasAreAligned) {
  const Device& d = device_for(Backend::Cpu);
  const size_t a = d.arena_alignment();
  ASSERT_GE(a, 64u);
  ASSERT_EQ(a & (a - 1), 0u) << "alignment is a power of two";
  for (size_t pages : {1, 3, 17}) {
    void* p = d.allocate(pages * a);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % a, 0u);
    d.fill(p, 0x5A, pages * a);
    EXPECT_EQ(static_cast<unsigned char*>(p)[pages * a - 1], 0x5A);
    d.free(p);
  }
  d.free(nullptr);
  // An executor's arenas come from its device, aligned the same way.
  auto sg = step("convnet", DType::f32);
  Executor ex(sg->g, ExecConfig{});
  EXPECT_EQ(&ex.device(), &d);
  for (size_t k = 0; k < kNumArenas; ++k) {
    const auto mem = ex.arena(static_cast<Arena>(k));
    if (mem.ptr) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(mem.ptr) % a, 0u) << arena_name(static_cast<Arena>(k));
    }
  }
}

TEST(Device, HostCopies) {
  const Device& d = device_for(Backend::Cpu);
  void* p = d.allocate(d.arena_alignment());
  const std::vector<int32_t> in{1, -2, 3, 1 << 30};
  d.copy_to_device(p, in.data(), in.size() * 4);
  std::vector<int32_t> out(4, 0);
  d.copy_to_host(out.data(), p, out.size() * 4);
  EXPECT_EQ(out, in);
  d.free(p);
}

// Devices by name: the built-in ones are there, an unknown name is refused
// naming them, and a program's own device is found once registered.
TEST(Device, RegistryFindsDevicesByName) {
  const std::vector<std::string> names = device_names();
  for (const char* n : {"cpu", "reference", "reference64", "reference-offset", "cpu-offset", "cpu-own-memory", "cuda"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  for (const char* n : {"cpu", "reference", "reference64", "reference-offset", "cpu-offset", "cpu-own-memory"})
    EXPECT_STREQ(device_named(n).name(), n);
  // Only the device with memory of its own answers memory_info: its
  // capacity, less what its arenas hold.
  size_t free = 0, total = 0;
  EXPECT_FALSE(device_named("cpu-offset").memory_info(free, total));
  const Device& own = device_named("cpu-own-memory");
  ASSERT_TRUE(own.memory_info(free, total));
  EXPECT_EQ(total, kOwnMemoryDeviceBytes);
  const size_t before = free;
  void* p = own.allocate(size_t(3) << 20);
  ASSERT_TRUE(own.memory_info(free, total));
  EXPECT_EQ(free, before - (size_t(3) << 20));
  EXPECT_THROW((void)own.allocate(kOwnMemoryDeviceBytes), std::bad_alloc);
  own.free(p);
  ASSERT_TRUE(own.memory_info(free, total));
  EXPECT_EQ(free, before);
  EXPECT_EQ(&device_named("cpu"), &device_for(Backend::Cpu));
  try {
    (void)device_named("tpu");
    ADD_FAILURE() << "an unknown device was found";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'tpu'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("reference-offset"), std::string::npos) << e.what();
  }
  register_device("mine", [] () -> const Device& { return offset_device(false); });
  EXPECT_EQ(&device_named("mine"), &offset_device(false));
  // An ExecConfig's device wins over its backend.
  ExecConfig cfg;
  EXPECT_EQ(&device_of(cfg), &device_for(Backend::Cpu));
  cfg.device = &device_named("reference-offset");
  EXPECT_EQ(&device_of(cfg), cfg.device);
}

// Each device reads its own kernel table: one registered under a new
// name holds the device's kernel, the built-in tables hold theirs, and a
// name nothing registered into is an empty table.
TEST(KernelTable, ADevicesOwnTableHoldsItsKernels) {
  EXPECT_NE(kernel_table("reference").find("relu"), nullptr);
  EXPECT_NE(kernel_table("cpu").find("conv2d"), nullptr);
  EXPECT_TRUE(kernel_table("never-registered").ops().empty());
  register_device_kernel("test-table", "relu", [](const LoweredGraph& lg, NodeId id) {
    return (*kernel_table("reference").find("relu"))(lg, id);
  });
  const KernelTable& t = kernel_table("test-table");
  EXPECT_EQ(t.ops(), std::vector<std::string>{"relu"});
  Graph g;
  const ValueId x = g.input("x", {2, 3});
  g.add1("relu", {x}, {}, "r");
  const LoweredGraph lg(g, device_for(Backend::Reference));
  const std::unique_ptr<kernels::Kernel> k = (*t.find("relu"))(lg, 0);
  ASSERT_NE(k, nullptr);
  const std::unique_ptr<kernels::Kernel> ref = (*kernel_table("reference").find("relu"))(lg, 0);
  EXPECT_STREQ(k->name(), ref->name());
  EXPECT_TRUE(t.takes(g, g.node(0)));
}

// The test devices' arenas are not host memory: a host read through one of
// their pointers faults, while their copies and fill reach the bytes; their
// kernels compute what the device they wrap computes.
TEST(Device, OffsetDevicesArenasAreOutOfTheHostsReach) {
  for (const char* name : {"reference-offset", "cpu-offset"}) {
    const Device& d = device_named(name);
    EXPECT_FALSE(d.host_addressable()) << name;
    const size_t a = d.arena_alignment();
    void* p = d.allocate(2 * a);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % a, 0u) << name;
    EXPECT_DEATH({ std::printf("%d\n", *static_cast<volatile int*>(p)); }, "") << name;
    const std::vector<int32_t> in{7, -8, 9, 1 << 29};
    d.fill(p, 0x11, 2 * a);
    d.copy_to_device(static_cast<char*>(p) + a, in.data(), in.size() * 4);
    std::vector<int32_t> out(4, 0);
    d.copy_to_host(out.data(), static_cast<char*>(p) + a, out.size() * 4);
    EXPECT_EQ(out, in) << name;
    unsigned char b = 0;
    d.copy_to_host(&b, static_cast<char*>(p) + a - 1, 1);
    EXPECT_EQ(b, 0x11) << name;
    d.free(p);
  }
  EXPECT_EQ(device_named("reference-offset").wide_floats(), device_named("reference").wide_floats());
  // A step on a test device equals one on the device it wraps, bit for bit.
  auto sg = step("convnet", DType::f32);
  for (Backend b : {Backend::Reference, Backend::Cpu}) {
    ExecConfig plain, offset;
    plain.backend = offset.backend = b;
    offset.device = &offset_device(b == Backend::Cpu);
    Executor e1(sg->g, plain), e2(sg->g, offset);
    EXPECT_FALSE(e2.device().host_addressable());
    for (Executor* e : {&e1, &e2}) {
      e->init_params(5);
      std::vector<float> x(static_cast<size_t>(numel(sg->g.value(sg->x).shape)));
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
      e->write_f32(sg->x, x.data());
      std::vector<int32_t> y(static_cast<size_t>(numel(sg->g.value(sg->labels).shape)));
      for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int32_t>(i % 10);
      e->feed(sg->labels, y.data(), y.size() * 4);
      kernels::StepContext ctx;
      ctx.lr = 0.01;
      ctx.seed = 5;
      e->run(ctx);
    }
    EXPECT_EQ(e1.fetch_scalar(sg->loss), e2.fetch_scalar(sg->loss)) << backend_name(b);
    for (ValueId p : sg->g.params()) {
      const size_t n = static_cast<size_t>(numel(sg->g.value(p).shape));
      std::vector<float> w1(n), w2(n);
      e1.read_f32(p, w1.data());
      e2.read_f32(p, w2.data());
      EXPECT_EQ(std::memcmp(w1.data(), w2.data(), n * 4), 0) << backend_name(b) << " " << sg->g.value(p).name;
    }
    // Arena ranges go through the device's copies.
    std::vector<unsigned char> r1(64), r2(64);
    e1.read_arena(Arena::Params, 0, r1.data(), r1.size());
    e2.read_arena(Arena::Params, 0, r2.data(), r2.size());
    EXPECT_EQ(r1, r2);
    e2.write_arena(Arena::Params, 8, r1.data(), 8);
    EXPECT_THROW(e2.read_arena(Arena::Params, e2.plan().arena_bytes[static_cast<size_t>(Arena::Params)], r2.data(), 1),
                 std::invalid_argument);
  }
}

// The context holds the CPU lowering's layouts for the whole graph, equal to
// cpu_layouts(g); the reference devices, the f32 view and the off switch
// keep everything plain.
TEST(LoweredGraph, LayoutsAreTheCpuLoweringsChoice) {
  for (DType prec : {DType::f32, DType::bf16}) {
    auto sg = step("resnet18", prec);
    const Graph& g = sg->g;
    const std::vector<Layout> expected = cpu_layouts(g);
    // bf16 takes the blocked kernels only where oneDNN computes in bf16 (not
    // on AVX2: there bf16 nodes run as f32 kernels between conversions).
    if (prec == DType::f32 || kernels::cpu::onednn_bf16_compute()) {
      ASSERT_GT(count(expected, Layout::Blocked16), 0u) << "ResNet-18 has blocked activations (" << dtype_name(prec) << ")";
    }
    const LoweredGraph lg(g, device_for(Backend::Cpu));
    ASSERT_NE(cpu_lowering(lg), nullptr);
    EXPECT_EQ(cpu_lowering(lg)->layouts, expected);
    EXPECT_EQ(cpu_value_layouts(lg), expected);
    if (prec == DType::bf16) {
      ASSERT_NE(lg.f32_view(), nullptr);
      const LoweredGraph& view = *lg.f32_view();
      EXPECT_TRUE(view.options().plain);
      EXPECT_EQ(count(cpu_value_layouts(view), Layout::Plain), g.num_values());
      for (const Value& v : view.graph().values()) EXPECT_NE(v.dtype, DType::bf16);
      EXPECT_EQ(view.f32_view(), nullptr);
    } else {
      EXPECT_EQ(lg.f32_view(), nullptr);
    }
    LowerOptions off;
    off.blocked_layouts = false;
    const LoweredGraph plain(g, device_for(Backend::Cpu), off);
    EXPECT_EQ(count(cpu_value_layouts(plain), Layout::Plain), g.num_values());
    for (Backend b : {Backend::Reference, Backend::Reference64}) {
      const LoweredGraph ref(g, device_for(b));
      EXPECT_EQ(ref.device_lowering(), nullptr);  // the CPU's layouts are the CPU's alone
      EXPECT_EQ(count(cpu_value_layouts(ref), Layout::Plain), g.num_values());
    }
    // Reference64 stores every float as double: no f32 view to convert through.
    EXPECT_EQ(LoweredGraph(g, device_for(Backend::Reference64)).f32_view(), nullptr);
  }
}

// Executors with the switch off make no blocked kernel, and their plan
// differs from the blocked one only where kernels' scratch does.
TEST(LoweredGraph, BlockedLayoutsOffViaConfig) {
  auto sg = step("resnet18", DType::f32);
  ExecConfig on, off;
  on.defer_allocation = off.defer_allocation = true;
  off.blocked_layouts = false;
  Executor a(sg->g, on), b(sg->g, off);
  size_t blocked = 0;
  for (size_t k = 0; k < sg->g.num_nodes(); ++k) {
    blocked += std::string(a.kernel_name(k)).find("blk16") != std::string::npos;
    EXPECT_EQ(std::string(b.kernel_name(k)).find("blk16"), std::string::npos) << b.kernel_name(k);
  }
  EXPECT_GT(blocked, 0u);
  expect_same_plan(plan_for(sg->g, off), b.plan(), "resnet18 plain");
}

// plan_for equals the executor's plan byte for byte, with no kernel-size
// cache, a cold one and a warm one (a second graph sharing every layer), in
// f32 and bf16, with and without recomputation, on every device.
TEST(PlanFor, EqualsTheExecutorsPlan) {
  for (const char* model : {"convnet", "resnet18"})
    for (DType prec : {DType::f32, DType::bf16})
      for (const char* rc : {"none", "cheap"}) {
        auto sg = step(model, prec, rc);
        const std::string what = std::string(model) + " " + dtype_name(prec) + " recompute " + rc;
        ExecConfig cfg;
        cfg.defer_allocation = true;
        Executor ex(sg->g, cfg);
        expect_same_plan(plan_for(sg->g, cfg), ex.plan(), what + " (no cache)");
        cfg.kernel_sizes = std::make_shared<KernelSizes>();
        expect_same_plan(plan_for(sg->g, cfg), ex.plan(), what);
        const size_t signatures = cfg.kernel_sizes->size();
        EXPECT_GT(signatures, 0u);
        expect_same_plan(plan_for(sg->g, cfg), ex.plan(), what + " (cached)");
        auto again = step(model, prec, rc);
        expect_same_plan(plan_for(again->g, cfg), ex.plan(), what + " (another graph, cached)");
        EXPECT_EQ(cfg.kernel_sizes->size(), signatures) << what << ": a graph of the same layers added kernels";
        ExecConfig guard = cfg;
        guard.plan.guard_bytes = 64;
        expect_same_plan(plan_for(sg->g, guard), Executor(sg->g, guard).plan(), what + " guard bytes");
      }
  auto sg = step("convnet", DType::bf16);
  for (Backend b : {Backend::Reference, Backend::Reference64}) {
    ExecConfig cfg;
    cfg.backend = b;
    cfg.defer_allocation = true;
    expect_same_plan(plan_for(sg->g, cfg), Executor(sg->g, cfg).plan(), std::string("convnet bf16 on ") + backend_name(b));
  }
}

// Two nodes that differ only in what the signature must see get different
// signatures: shapes, layouts, the lowering flags.
TEST(PlanFor, SignatureSeesShapesLayoutsAndFlags) {
  auto a = step("resnet18", DType::f32);
  const LoweredGraph blocked(a->g, device_for(Backend::Cpu));
  LowerOptions off;
  off.blocked_layouts = false;
  const LoweredGraph plain(a->g, device_for(Backend::Cpu), off);
  const LoweredGraph ref(a->g, device_for(Backend::Reference));
  size_t differ = 0;
  for (size_t k = 0; k < a->g.num_nodes(); ++k) {
    const NodeId id = static_cast<NodeId>(k);
    EXPECT_NE(node_signature(blocked, id), node_signature(ref, id));
    differ += node_signature(blocked, id) != node_signature(plain, id);
  }
  EXPECT_EQ(differ, a->g.num_nodes());  // the flag is part of every signature
  // The same layer at another batch size.
  train::StepSpec s;
  s.batch = 16;
  s.optimizer.kind = "adam";
  auto b = train::build_step_graph(s);
  auto c = step("convnet", DType::f32);
  const LoweredGraph lb(b->g, device_for(Backend::Cpu)), lc(c->g, device_for(Backend::Cpu));
  ASSERT_EQ(b->g.num_nodes(), c->g.num_nodes());
  EXPECT_NE(node_signature(lb, 0), node_signature(lc, 0));
}
