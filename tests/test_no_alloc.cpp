// A training step allocates nothing that memfit did not plan.
//
// This executable replaces malloc, calloc, realloc, the aligned allocators
// and operator new with counting wrappers around glibc's allocator. While the
// counter is armed, every allocation is recorded with whether oneDNN's
// library is on its call stack. Steady-state Executor::run steps of the
// ConvNet and ResNet-18 on the CPU backend must then show:
//  - no allocation from memfit's own code (kernels, executor, libgomp teams
//    started by memfit's loops);
//  - oneDNN's own allocations are small, the same in number every step and
//    all freed before the step ends: bounded, not a leak, no hidden buffers.
//    They cannot be avoided through oneDNN's API: dnnl_primitive_execute
//    converts the argument array into an std::unordered_map (one node per
//    argument plus a bucket array) for the execution context, and several
//    implementations wrap their parallel loops in std::function closures.
//    At most a few hundred bytes are outstanding at once -- plus, on CPUs
//    without AVX-512 (no brgemm matmul, so oneDNN's "gemm:jit" runs the
//    linear layers), the gemm driver's packing buffers: megabytes, freed
//    within each call. Those each kernel declares (Kernel::heap_bytes) and
//    the plan counts (Plan::library_heap_bytes). The bound enforced per step
//    is therefore kArgBytes + the plan's library heap: 64 KiB on AVX-512
//    (the plan's heap is 0 there), 64 KiB + the declared gemm bound on AVX2.
// The same holds with update in backward (the optimizer's per-parameter
// kernels run inside backward).
// MEMFIT_ALLOC_TRACE=N prints the call stacks of the first N recorded
// allocations (set MEMFIT_ALLOC_TRACE_ALL=1 to include oneDNN's).
#include <dlfcn.h>
#include <execinfo.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>

#include "kernels/kernel.hpp"
#include "memfit/runtime.hpp"
#include "ops/linear/cpu.hpp"
#include "compile/step_graph.hpp"

// Under AddressSanitizer the allocator belongs to the sanitizer: the hooks
// are left out and the counting tests skip.
#if defined(__SANITIZE_ADDRESS__)
#define MEMFIT_ALLOC_HOOKS 0
#else
#define MEMFIT_ALLOC_HOOKS 1
#endif

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void __libc_free(void*);
void* __libc_memalign(size_t, size_t);
}

namespace {

// Address ranges of oneDNN's code, read once before counting starts.
struct Range {
  uintptr_t lo = 0, hi = 0;
};
Range g_dnnl[8];
int g_ndnnl = 0;

std::atomic<bool> g_armed{false};
std::atomic<long> g_own_calls{0}, g_lib_calls{0}, g_lib_bytes{0};
std::atomic<int> g_traces{0};
int g_trace_limit = 0;
bool g_trace_all = false;
thread_local bool t_in_hook = false;

// Pointers allocated while armed and not yet freed: a fixed open-addressing
// table (the hooks cannot allocate), guarded by a spin lock.
constexpr size_t kSlots = 1 << 16;
uintptr_t g_live[kSlots];
size_t g_live_bytes[kSlots];
std::atomic<long> g_live_count{0}, g_live_now{0}, g_live_peak{0};
std::atomic_flag g_lock = ATOMIC_FLAG_INIT;
bool g_overflow = false;

struct Lock {
  Lock() {
    while (g_lock.test_and_set(std::memory_order_acquire)) {
    }
  }
  ~Lock() { g_lock.clear(std::memory_order_release); }
};

size_t slot_of(uintptr_t p) { return (p >> 4) * 0x9E3779B97F4A7C15ull >> 48 & (kSlots - 1); }

void live_add(void* p, size_t n) {
  Lock l;
  size_t i = slot_of(reinterpret_cast<uintptr_t>(p));
  for (size_t k = 0; k < kSlots; ++k, i = (i + 1) & (kSlots - 1))
    if (g_live[i] == 0 || g_live[i] == 1) {
      g_live[i] = reinterpret_cast<uintptr_t>(p);
      g_live_bytes[i] = n;
      g_live_count.fetch_add(1);
      long now = g_live_now.fetch_add(static_cast<long>(n)) + static_cast<long>(n);
      if (now > g_live_peak.load()) g_live_peak = now;
      return;
    }
  g_overflow = true;
}

void live_remove(void* p) {
  if (!p || g_live_count.load(std::memory_order_relaxed) == 0) return;
  Lock l;
  size_t i = slot_of(reinterpret_cast<uintptr_t>(p));
  for (size_t k = 0; k < kSlots && g_live[i] != 0; ++k, i = (i + 1) & (kSlots - 1))
    if (g_live[i] == reinterpret_cast<uintptr_t>(p)) {
      g_live[i] = 1;  // tombstone
      g_live_count.fetch_sub(1);
      g_live_now.fetch_sub(static_cast<long>(g_live_bytes[i]));
      return;
    }
}

void live_clear() {
  Lock l;
  std::memset(g_live, 0, sizeof g_live);
  g_live_count = 0;
  g_live_now = 0;
  g_live_peak = 0;
  g_overflow = false;
}

bool in_dnnl(void* const* frames, int depth) {
  for (int f = 0; f < depth; ++f) {
    const auto a = reinterpret_cast<uintptr_t>(frames[f]);
    for (int r = 0; r < g_ndnnl; ++r)
      if (a >= g_dnnl[r].lo && a < g_dnnl[r].hi) return true;
  }
  return false;
}

// Called after the real allocation; p is the new block (nullptr on failure).
void note(const char* what, size_t n, void* p) {
  if (!g_armed.load(std::memory_order_relaxed) || t_in_hook || !p) return;
  t_in_hook = true;
  void* frames[48];
  const int depth = backtrace(frames, 48);
  const bool lib = in_dnnl(frames, depth);
  if (lib) {
    g_lib_calls.fetch_add(1, std::memory_order_relaxed);
    g_lib_bytes.fetch_add(static_cast<long>(n), std::memory_order_relaxed);
  } else {
    g_own_calls.fetch_add(1, std::memory_order_relaxed);
  }
  live_add(p, n);
  if ((!lib || g_trace_all) && g_traces.fetch_add(1, std::memory_order_relaxed) < g_trace_limit) {
    char line[128];
    int len = std::snprintf(line, sizeof line, "--- %s(%zu)%s on thread %d\n", what, n, lib ? " in oneDNN" : "",
                            static_cast<int>(gettid()));
    if (write(2, line, static_cast<size_t>(len)) < 0) {
    }
    backtrace_symbols_fd(frames, depth, 2);
  }
  t_in_hook = false;
}

[[maybe_unused]] void* counted_new(size_t n, size_t al = 0) {
  void* p = al > alignof(std::max_align_t) ? __libc_memalign(al, n ? n : 1) : __libc_malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  note("operator new", n, p);
  return p;
}

}  // namespace

#if MEMFIT_ALLOC_HOOKS
extern "C" {
void* malloc(size_t n) {
  void* p = __libc_malloc(n);
  note("malloc", n, p);
  return p;
}
void* calloc(size_t a, size_t b) {
  void* p = __libc_calloc(a, b);
  note("calloc", a * b, p);
  return p;
}
void* realloc(void* old, size_t n) {
  if (old) live_remove(old);
  void* p = __libc_realloc(old, n);
  note("realloc", n, p);
  return p;
}
void free(void* p) {
  live_remove(p);
  __libc_free(p);
}
void* memalign(size_t al, size_t n) {
  void* p = __libc_memalign(al, n);
  note("memalign", n, p);
  return p;
}
void* aligned_alloc(size_t al, size_t n) {
  void* p = __libc_memalign(al, n);
  note("aligned_alloc", n, p);
  return p;
}
int posix_memalign(void** out, size_t al, size_t n) {
  void* p = __libc_memalign(al, n);
  if (!p && n) return ENOMEM;
  note("posix_memalign", n, p);
  *out = p;
  return 0;
}
}

void* operator new(size_t n) { return counted_new(n); }
void* operator new[](size_t n) { return counted_new(n); }
void* operator new(size_t n, std::align_val_t al) { return counted_new(n, static_cast<size_t>(al)); }
void* operator new[](size_t n, std::align_val_t al) { return counted_new(n, static_cast<size_t>(al)); }
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  void* p = __libc_malloc(n ? n : 1);
  note("operator new", n, p);
  return p;
}
void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  void* p = __libc_malloc(n ? n : 1);
  note("operator new", n, p);
  return p;
}
void operator delete(void* p) noexcept { free(p); }
void operator delete[](void* p) noexcept { free(p); }
void operator delete(void* p, size_t) noexcept { free(p); }
void operator delete[](void* p, size_t) noexcept { free(p); }
void operator delete(void* p, std::align_val_t) noexcept { free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { free(p); }
#endif  // MEMFIT_ALLOC_HOOKS

using namespace memfit;

namespace {

// Finds the executable mappings of libdnnl in /proc/self/maps.
void find_dnnl() {
  g_ndnnl = 0;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line) && g_ndnnl < 8) {
    if (line.find("libdnnl") == std::string::npos || line.find(" r-xp ") == std::string::npos) continue;
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2) g_dnnl[g_ndnnl++] = {lo, hi};
  }
}

struct StepCounts {
  long own = 0;         // allocations outside oneDNN
  long lib = 0;         // allocations inside oneDNN
  long lib_bytes = 0;
  long left = 0;        // allocated during the step and not freed by its end
  long peak_bytes = 0;  // most bytes outstanding at once during the step
  bool overflow = false;
};

constexpr long kArgBytes = 64 << 10;  // oneDNN's argument maps and loop closures

class StepRunner {
 public:
  StepRunner(const std::string& model, int64_t batch, DType precision = DType::f32, DType saved = DType::f32,
             bool update_in_backward = false, const std::string& optimizer = "sgd", const std::string& state = "fp32",
             DType weights = DType::f32, int64_t accumulation = 1, DType accumulated = DType::f32,
             const std::string& offload = "") {
    train::StepSpec spec;
    // "SET@N": offload SET, its copies moved N ahead (default: the policy's).
    spec.offload = offload.substr(0, offload.find('@'));
    if (offload.find('@') != std::string::npos) spec.offload_ahead = std::stoi(offload.substr(offload.find('@') + 1));
    spec.master_weights = weights;
    spec.accumulation = accumulation;
    spec.accumulated_grads = accumulated;
    accumulation_ = accumulation;
    spec.update_in_backward = update_in_backward;
    spec.model = model;
    spec.batch = batch;
    spec.precision = precision;
    spec.saved = saved;
    spec.optimizer.kind = optimizer;
    spec.optimizer.momentum = 0.9;
    spec.optimizer_state = state;
    if (model == "lstm-classifier")  // tokens [T = 50] of a 500-word vocabulary, with lengths
      spec.data = {{"tokens", DType::i32, {50}, 0.0, 500}, {"lengths", DType::i32, {}, 0.0, 51},
                   {"labels", DType::i32, {}, -1.0, 10}};
    if (model == "gpt-tiny")  // windows of T = 32 tokens of a 100-token vocabulary
      spec.data = {{"tokens", DType::i32, {32}, 0.0, 100}, {"targets", DType::i32, {32}, -1.0, 100}};
    if (model == "gpt-tiny") spec.classes = 100;
    if (model == "bert-tiny")  // tokens [T = 32] of 100 ids, a 0/1 attention mask and token types
      spec.data = {{"tokens", DType::i32, {32}, 0.0, 100}, {"attention_mask", DType::i32, {32}, 0.0, 2},
                   {"token_type_ids", DType::i32, {32}, 0.0, 2}, {"labels", DType::i32, {}, -1.0, 10}};
    sg_ = train::build_step_graph(spec);
    ExecConfig cfg;
    cfg.backend = Backend::Cpu;
    if (!offload.empty()) cfg.tier_dir = ::testing::TempDir();
    ex_ = std::make_unique<Executor>(sg_->g, cfg);
    if (!offload.empty() && !(ex_->tier() && ex_->plan().tier_read_bytes > 0))
      throw std::logic_error("offload '" + offload + "' left nothing in the tier");
    ex_->init_params(1);
    int32_t* y = ex_->ptr<int32_t>(sg_->labels);
    const size_t nx = static_cast<size_t>(numel(sg_->g.value(sg_->x).shape));
    for (const train::StepInput& in : sg_->inputs) {
      if (in.target || in.spec.dtype != DType::i32) continue;
      int32_t* t = ex_->ptr<int32_t>(in.value);  // token ids, lengths in [0, range)
      for (int64_t i = 0; i < numel(sg_->g.value(in.value).shape); ++i)
        t[i] = static_cast<int32_t>((uint64_t(i) * 2654435761u) % uint64_t(in.spec.range));
    }
    if (sg_->g.value(sg_->x).dtype != DType::i32) {
      float* x = ex_->ptr<float>(sg_->x);
      for (size_t i = 0; i < nx; ++i) x[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    }
    for (int64_t i = 0; i < batch; ++i) y[i] = static_cast<int32_t>(i % 10);
    ctx_.lr = 0.01;
    ctx_.loss_scale = precision == DType::f16 ? 256.0 : 1.0;  // exercises the scaled cast
    ctx_.grad_scale = 1.0 / ctx_.loss_scale;
  }
  // With accumulation, steps take the micro-batch numbers in turn (the
  // whole schedule each time: what matters is each kernel's path).
  void step() {
    ctx_.micro = ctx_.step % accumulation_;
    ex_->run(ctx_);
    ++ctx_.step;
  }
  size_t library_heap() const { return ex_->plan().library_heap_bytes; }
  StepCounts counted_step() {
    g_own_calls = 0;
    g_lib_calls = 0;
    g_lib_bytes = 0;
    g_traces = 0;
    live_clear();
    g_armed = true;
    step();
    g_armed = false;
    return {g_own_calls.load(), g_lib_calls.load(), g_lib_bytes.load(), g_live_count.load(), g_live_peak.load(),
            g_overflow};
  }

 private:
  std::unique_ptr<train::StepGraph> sg_;
  std::unique_ptr<Executor> ex_;
  kernels::StepContext ctx_;
  int64_t accumulation_ = 1;
};

class NoAlloc : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!MEMFIT_ALLOC_HOOKS) GTEST_SKIP() << "allocation hooks are off under AddressSanitizer";
    if (const char* t = std::getenv("MEMFIT_ALLOC_TRACE")) g_trace_limit = std::atoi(t);
    g_trace_all = std::getenv("MEMFIT_ALLOC_TRACE_ALL") != nullptr;
    void* frames[4];
    backtrace(frames, 4);  // loads the unwinder before a hook needs it
  }

  void check_model(const std::string& model, int64_t batch, int steps, DType precision = DType::f32,
                   DType saved = DType::f32, bool update_in_backward = false, const std::string& optimizer = "sgd",
                   const std::string& state = "fp32", DType weights = DType::f32, int64_t accumulation = 1,
                   DType accumulated = DType::f32, const std::string& offload = "") {
    StepRunner r(model, batch, precision, saved, update_in_backward, optimizer, state, weights, accumulation,
                 accumulated, offload);
    find_dnnl();  // after the kernels were made: oneDNN is loaded
    ASSERT_GT(g_ndnnl, 0) << "oneDNN's code not found in /proc/self/maps";
    r.step();  // warm-up: first-touch of arenas, lazily made library state
    r.step();
    StepCounts first{};
    for (int s = 0; s < steps; ++s) {
      StepCounts c = r.counted_step();
      ASSERT_FALSE(c.overflow) << "allocation table overflowed";
      EXPECT_EQ(c.own, 0) << model << ": memfit allocated during steady-state step " << s
                          << " (MEMFIT_ALLOC_TRACE=20 shows where)";
      EXPECT_EQ(c.left, 0) << model << ": " << c.left << " allocations made during step " << s
                           << " were still held after it";
      if (s == 0) first = c;
      else EXPECT_EQ(c.lib, first.lib) << model << ": oneDNN's allocations differ between steps";
      // Argument maps and loop closures, plus the gemm packing the plan
      // counts: no buffer the plan does not know of.
      const long bound = kArgBytes + static_cast<long>(r.library_heap());
      EXPECT_LT(c.peak_bytes, bound) << model << ": oneDNN held " << c.peak_bytes
                                     << " bytes of its own at once during a step; the plan counts "
                                     << r.library_heap() << " bytes of library heap";
      std::printf("%s batch %lld step %d: memfit allocations %ld; oneDNN-internal %ld (%ld bytes, at most %ld "
                  "outstanding, bound %ld = 64 KiB + planned library heap %zu), freed within the step\n",
                  model.c_str(), static_cast<long long>(batch), s, c.own, c.lib, c.lib_bytes, c.peak_bytes, bound,
                  r.library_heap());
    }
  }
};

}  // namespace

TEST_F(NoAlloc, HooksSeeAllocations) {
  find_dnnl();
  live_clear();
  g_own_calls = 0;
  g_armed = true;
  auto* v = new std::vector<int>(1000);
  void* m = std::malloc(100);
  void* a = nullptr;
  EXPECT_EQ(posix_memalign(&a, 64, 256), 0);
  g_armed = false;
  EXPECT_EQ(g_own_calls.load(), 4);  // the vector, its elements, malloc, posix_memalign
  EXPECT_EQ(g_live_count.load(), 4);
  std::free(m);
  std::free(a);
  delete v;
  EXPECT_EQ(g_live_count.load(), 0);
}

TEST_F(NoAlloc, ConvNetStep) { check_model("convnet", 32, 3); }
TEST_F(NoAlloc, LstmClassifierStep) { check_model("lstm-classifier", 16, 3); }
TEST_F(NoAlloc, BertTinyStep) { check_model("bert-tiny", 8, 3); }

TEST_F(NoAlloc, ResNet18Step) { check_model("resnet18", 8, 2); }

// Mixed precision: bf16 kernels, the f32 kernels between conversions (fp16;
// bf16 convolutions where f32 is faster), the loss-scaled cast, and the
// saved-activation casts allocate nothing either.
TEST_F(NoAlloc, ResNet18Bf16Step) { check_model("resnet18", 8, 2, DType::bf16); }
TEST_F(NoAlloc, ConvNetFp16Step) { check_model("convnet", 32, 2, DType::f16); }
TEST_F(NoAlloc, ResNet18SavedBf16Step) { check_model("resnet18", 8, 2, DType::f32, DType::bf16); }

// Update in backward: one update kernel per parameter, interleaved with
// backward, and gradients in the activations arena allocate nothing either.
TEST_F(NoAlloc, ConvNetUpdateInBackwardStep) { check_model("convnet", 32, 3, DType::f32, DType::f32, true); }
TEST_F(NoAlloc, BertTinyUpdateInBackwardStep) { check_model("bert-tiny", 8, 3, DType::f32, DType::f32, true); }
// The optimizer updates of compact state (bf16 with stochastic rounding,
// 8-bit blocks on each thread's stack; SGD momentum and Adam moments) and
// Adafactor's factored one: ResNet-18's tensors are quantised and big
// enough for the updates to run on a team.
TEST_F(NoAlloc, ResNet18AdamW8BitStep) { check_model("resnet18", 8, 2, DType::f32, DType::f32, false, "adamw", "8bit"); }
TEST_F(NoAlloc, ConvNetAdamBf16Step) { check_model("convnet", 32, 2, DType::f32, DType::f32, false, "adam", "bf16"); }
TEST_F(NoAlloc, ConvNetSgd8BitStep) { check_model("convnet", 32, 2, DType::f32, DType::f32, false, "sgd", "8bit"); }
TEST_F(NoAlloc, ResNet18AdafactorStep) { check_model("resnet18", 8, 2, DType::f32, DType::f32, false, "adafactor"); }
// bf16 master weights: the layers that widen them (conversions in their
// scratch), the bf16 linear and embedding kernels, the updates' stochastic
// rounding; with bf16 activations and with update in backward.
TEST_F(NoAlloc, BertTinyBf16WeightsStep) {
  check_model("bert-tiny", 8, 3, DType::bf16, DType::f32, false, "adamw", "8bit", DType::bf16);
}
TEST_F(NoAlloc, ConvNetBf16WeightsUpdateInBackwardStep) {
  check_model("convnet", 32, 2, DType::f32, DType::f32, true, "sgd", "fp32", DType::bf16);
}

// Gradient accumulation: f32 sums (grad_accumulate), and bf16 sums fused
// into the products and the embeddings' rows (grad_accumulate_matmul, a
// panel at a time in its scratch; grad_accumulate_rows, its ids sorted in
// its scratch): gpt-tiny's tied table and BERT's untied ones; micro-batch 0
// (writes) and 1 (adds) in turn.
TEST_F(NoAlloc, GptTinyAccumulatedStep) {
  check_model("gpt-tiny", 4, 4, DType::f32, DType::f32, false, "adamw", "fp32", DType::f32, 2, DType::f32);
}
TEST_F(NoAlloc, GptTinyBf16AccumulatedStep) {
  check_model("gpt-tiny", 4, 4, DType::f32, DType::f32, false, "adamw", "8bit", DType::bf16, 2, DType::bf16);
}
TEST_F(NoAlloc, BertTinyBf16AccumulatedStep) {
  check_model("bert-tiny", 8, 4, DType::f32, DType::f32, false, "adamw", "fp32", DType::f32, 2, DType::bf16);
}

// Offloaded parameters and optimizer state: tier_load / tier_store move
// them through the store's one aligned buffer, checking and updating each
// sector's checksum in place; alone and with update in backward; queued on
// the store's I/O thread (its ring made with the store) and, for the
// ConvNet, also copied where used.
TEST_F(NoAlloc, ConvNetOffloadedStep) {
  check_model("convnet", 32, 2, DType::f32, DType::f32, false, "adam", "fp32", DType::f32, 1, DType::f32, "all");
}
TEST_F(NoAlloc, ConvNetOffloadedSynchronousStep) {
  check_model("convnet", 32, 2, DType::f32, DType::f32, false, "adam", "fp32", DType::f32, 1, DType::f32, "all@0");
}
TEST_F(NoAlloc, GptTinyOffloadedUpdateInBackwardStep) {
  check_model("gpt-tiny", 4, 2, DType::f32, DType::f32, true, "adamw", "8bit", DType::f32, 1, DType::f32, "all");
}

// Each linear / matmul kernel's declared heap bound holds for the shapes the
// models and the fit produce and for large and skinny ones (a vocabulary-sized
// classifier, batch 1): the measured peak of oneDNN's own allocations inside
// one run stays within kArgBytes + heap_bytes(). On AVX-512 heap_bytes() is 0
// (brgemm), so this also checks that no gemm fallback hides there.
TEST_F(NoAlloc, MatmulHeapBound) {
  struct Shape3 {
    int64_t M, K, N;
  };
  const Shape3 shapes[] = {{64, 3136, 128}, {256, 3136, 128}, {32, 128, 10}, {1, 512, 10},   {4096, 768, 768},
                           {1024, 768, 3072}, {512, 3072, 768}, {256, 768, 8192}, {8, 4096, 64}, {3000, 64, 5}};
  std::vector<float> a, b, c, scratch;
  bool found = false;
  for (const Shape3& sh : shapes) {
    kernels::LinearParams p{sh.M, sh.K, sh.N, true};
    std::unique_ptr<kernels::Kernel> ks[] = {kernels::cpu::make_linear(p, kernels::ElemType::F32),
                                             kernels::cpu::make_linear_bwd_data(p, kernels::ElemType::F32),
                                             kernels::cpu::make_linear_bwd_weight(p, kernels::ElemType::F32)};
    const size_t mk = static_cast<size_t>(sh.M * sh.K), kn = static_cast<size_t>(sh.K * sh.N),
                 mn = static_cast<size_t>(sh.M * sh.N);
    a.assign(mk, 0.5f);
    b.assign(kn, 0.25f);
    c.assign(mn, 0.0f);
    std::vector<float> bias(static_cast<size_t>(sh.N), 0.0f), dx(mk), dw(kn), db(static_cast<size_t>(sh.N));
    for (int which = 0; which < 3; ++which) {
      kernels::Kernel& k = *ks[which];
      scratch.assign(k.scratch_bytes() / 4 + 16, 0.0f);
      if (which == 0) k.bind({a.data(), b.data(), bias.data()}, {c.data()}, scratch.data());
      if (which == 1) k.bind({c.data(), b.data()}, {dx.data()}, scratch.data());
      if (which == 2) k.bind({a.data(), c.data()}, {dw.data(), db.data()}, scratch.data());
      kernels::StepContext ctx;
      if (!found) {
        k.run(ctx);
        find_dnnl();
        found = true;
      }
      k.run(ctx);  // warm-up
      live_clear();
      g_armed = true;
      k.run(ctx);
      g_armed = false;
      const long bound = kArgBytes + static_cast<long>(k.heap_bytes());
      EXPECT_LT(g_live_peak.load(), bound) << k.name() << " M" << sh.M << " K" << sh.K << " N" << sh.N
                                           << ": oneDNN held " << g_live_peak.load() << " bytes at once; declared "
                                           << k.heap_bytes();
      std::printf("%-28s M%-5lld K%-5lld N%-5lld oneDNN peak %9ld bytes, declared heap %9zu\n", k.name(),
                  static_cast<long long>(sh.M), static_cast<long long>(sh.K), static_cast<long long>(sh.N),
                  g_live_peak.load(), k.heap_bytes());
    }
  }
}
