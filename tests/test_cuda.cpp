// The CUDA device (runtime/cuda/cuda_device.cpp, ops/<family>/cuda.cu)
// against the oracle, the double-precision reference device, on odd shapes;
// the ConvNet and ResNet-18 goldens against PyTorch on the GPU; what the plan promises
// there: one cudaMalloc per arena and none inside a step, the arenas
// measured by cudaMemGetInfo, and the same bits on every run (deterministic
// kernels: resume is exact).
//
// Where there is no GPU (or the build has no CUDA) the binary prints the
// reason and exits 77, which ctest reports as skipped. The entry
// test_cuda_lowering runs the CudaLowering cases alone, which need no GPU
// (MEMFIT_TEST_CUDA_LOWERING=1).
//
// Tolerances against the double reference: the GPU computes in f32 (no
// TF32: cuBLAS default math, cuDNN FMA math). A value that is one f32 sum
// of K products carries a relative error of about sqrt(K) 2^-24 (K <= 600
// here: ~1.5e-6) and a backward pass chains two or three of them, so each
// tensor is held to ||gpu - ref|| <= 1e-4 ||ref|| (L2; an indexing or
// formula error is O(1)) and each element to 1e-4 of the tensor's largest
// magnitude. Dropout masks and max-pool indices are integers: equal.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "golden_check.hpp"
#include "idx_files.hpp"
#include "json_out.hpp"
#include "run_binary.hpp"
#include "same_tensors.hpp"
#include "kernels/kernel.hpp"
#include "memfit/autodiff.hpp"
#include "memfit/builder.hpp"
#include "memfit/optim.hpp"
#include "memfit/rng.hpp"
#include "memfit/runtime.hpp"
#include "runtime/device.hpp"
#include "runtime/kernel_table.hpp"
#include "compile/step_graph.hpp"

#ifdef MEMFIT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace {

using namespace memfit;

// Inputs of a graph: floats (f32 values) and integers (i32 values), drawn
// from a seed.
struct Inputs {
  std::map<ValueId, std::vector<float>> floats;
  std::map<ValueId, std::vector<int32_t>> ints;
};

Inputs draw_inputs(const Graph& g, uint64_t seed, int32_t classes) {
  Inputs in;
  for (ValueId v : g.inputs()) {
    const Value& val = g.value(v);
    const size_t n = static_cast<size_t>(numel(val.shape));
    const uint64_t key = rng::stream_key(seed, rng::name_hash(val.name), 0);
    if (val.dtype == DType::i32) {
      auto& x = in.ints[v];
      for (size_t i = 0; i < n; ++i) x.push_back(static_cast<int32_t>(rng::uniform01(key, i) * classes) % classes);
    } else {
      auto& x = in.floats[v];
      for (size_t i = 0; i < n; ++i) x.push_back(rng::uniform_sym(key, i, 2.0f));
    }
  }
  return in;
}

void feed(Executor& ex, const Inputs& in) {
  for (const auto& [v, x] : in.floats) ex.write_f32(v, x.data());
  for (const auto& [v, x] : in.ints) ex.feed(v, x.data(), x.size() * sizeof(int32_t));
}

// Every f32 value of the graph that outlives the step (parameters,
// gradients, optimizer state, outputs) and the listed ones, as f32.
using Values = std::map<ValueId, std::vector<float>>;

Values read(Executor& ex, const std::vector<ValueId>& vs) {
  Values r;
  for (ValueId v : vs) r[v] = host_f32(ex, v);
  return r;
}

std::vector<ValueId> kept_values(const Graph& g) {
  std::vector<ValueId> r;
  for (size_t v = 0; v < g.num_values(); ++v) {
    const Value& val = g.value(static_cast<ValueId>(v));
    if (val.dtype != DType::f32) continue;
    if (val.cls == VClass::Param || val.cls == VClass::ParamGrad || val.cls == VClass::OptState ||
        val.cls == VClass::Buffer)
      r.push_back(static_cast<ValueId>(v));
  }
  return r;
}

// An executor of g on backend b, parameters from init seed 7, the inputs
// fed; keep_all: every value its own buffer, all readable after the step.
std::unique_ptr<Executor> ready(const Graph& g, Backend b, const Inputs& in, bool keep_all = false) {
  ExecConfig cfg;
  cfg.backend = b;
  cfg.verify = true;
  cfg.plan.no_plan = keep_all;
  auto ex = std::make_unique<Executor>(g, cfg);
  ex->init_params(7);
  feed(*ex, in);
  return ex;
}

// `steps` steps of g on backend b from init seed 7 and the given inputs;
// the listed values after them.
Values run_steps(const Graph& g, Backend b, const Inputs& in, const std::vector<ValueId>& vs, int steps,
                 std::vector<double>* losses = nullptr, ValueId loss = kNone) {
  const std::unique_ptr<Executor> exp = ready(g, b, in);
  Executor& ex = *exp;
  kernels::StepContext ctx;
  ctx.seed = 11;
  ctx.lr = 0.05;
  for (int s = 0; s < steps; ++s) {
    ctx.step = s;
    ex.run(ctx);
    if (losses) losses->push_back(ex.fetch_scalar(loss));
  }
  return read(ex, vs);
}

void expect_close(const Graph& g, const Values& gpu, const Values& ref, double rel = 1e-4) {
  for (const auto& [v, e] : ref) {
    const auto& a = gpu.at(v);
    ASSERT_EQ(a.size(), e.size());
    double d = 0, r = 0, mx = 0;
    for (size_t i = 0; i < e.size(); ++i) {
      d += (double(a[i]) - e[i]) * (double(a[i]) - e[i]);
      r += double(e[i]) * e[i];
      mx = std::max(mx, std::abs(double(e[i])));
    }
    EXPECT_LE(std::sqrt(d), rel * std::sqrt(r) + 1e-30) << g.value(v).name << ": relative L2 distance "
                                                        << std::sqrt(d / std::max(r, 1e-300));
    int bad = 0;
    for (size_t i = 0; i < e.size() && bad < 5; ++i)
      if (!(std::abs(double(a[i]) - e[i]) <= rel * mx + 1e-30)) {
        ++bad;
        ADD_FAILURE() << g.value(v).name << "[" << i << "]: gpu " << a[i] << ", reference " << e[i];
      }
  }
}

// A small CNN touching every CUDA kernel of a CNN step at odd sizes: a
// strided padded convolution, batch norm over images and over features
// (its running statistics too), an overlapping padded max pool, a dilated
// grouped convolution without bias, global average pooling, linear layers,
// dropout, label-smoothed cross-entropy, and the optimizer.
struct Net {
  Graph g;
  ValueId x = kNone, y = kNone, loss = kNone;
};

void build_cnn(Net& net, const OptimizerConfig& opt) {
  Graph& g = net.g;
  Builder b(g);
  net.x = g.input("x", {3, 3, 11, 9});
  net.y = g.input("y", {3}, DType::i32);
  // (No bias before a batch norm: its gradient is zero but for rounding.)
  ValueId h = conv2d(b, net.x, 6, 3, {.stride = 2, .pad = 1, .bias = false, .name = "conv1"});
  h = relu(b, batch_norm(b, h, {.name = "bn1"}));
  h = max_pool2d(b, h, 3, {.stride = 2, .pad = 1});
  h = relu(b, conv2d(b, h, 10, 3, {.pad = 2, .dilation = 2, .groups = 2, .bias = false, .name = "conv2"}));
  h = global_avg_pool(b, h);
  h = relu(b, batch_norm(b, linear(b, h, 7, {.bias = false, .name = "fc1"}), {.name = "bn2"}));
  h = dropout(b, h, 0.3, "drop");
  net.loss = softmax_xent(b, linear(b, h, 5, {.name = "fc2"}), net.y, 0.1);
  build_backward(g, net.loss);
  append_optimizer(g, opt);
}

// ---- Lowering coverage (no GPU needed) ----

TEST(CudaLowering, EveryOpOfTheZooCnnStepsHasACudaKernel) {
#ifndef MEMFIT_HAVE_CUDA
  GTEST_SKIP() << "this build has no CUDA";
#else
  for (const char* opt : {"sgd", "adam", "adamw"})
    for (const char* model : {"convnet", "resnet18"}) {
    train::StepSpec spec;
    spec.model = model;
    spec.batch = 4;
    spec.optimizer.kind = opt;
    for (bool training : {true, false}) {  // the training step and the evaluation graph
      spec.training = training;
      spec.with_loss = training;
      spec.with_metrics = !training;
      auto sg = train::build_step_graph(spec);
      for (const Node& n : sg->g.nodes())
        EXPECT_NE(find_cuda_kernel(n.op), nullptr) << "op " << n.op << " (" << model << ", " << opt
                                                    << (training ? "" : ", evaluation") << ") has no CUDA lowering";
    }
  }
#endif
}

TEST(CudaLowering, EveryOpOfTheTestNetsHasACudaKernel) {
#ifndef MEMFIT_HAVE_CUDA
  GTEST_SKIP() << "this build has no CUDA";
#else
  for (const char* opt : {"sgd", "adamw"}) {
    Net net;
    build_cnn(net, {.kind = opt, .clip_grad_norm = 1.0});
    for (const Node& n : net.g.nodes())
      EXPECT_NE(find_cuda_kernel(n.op), nullptr) << "op " << n.op << " has no CUDA lowering";
  }
#endif
}

TEST(CudaLowering, ActivationsAndAveragePoolingHaveCudaKernels) {
#ifndef MEMFIT_HAVE_CUDA
  GTEST_SKIP() << "this build has no CUDA";
#else
  for (const char* op : {"activation", "activation_bwd", "avg_pool2d", "avg_pool2d_bwd"})
    EXPECT_NE(find_cuda_kernel(op), nullptr) << op;
#endif
}

TEST(CudaLowering, NoGpuIsAClearError) {
  if (cuda_unavailable_reason().empty()) GTEST_SKIP() << "a GPU is here";
  try {
    (void)device_for(Backend::Cuda);
    FAIL() << "no error without a GPU";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(cuda_unavailable_reason()), std::string::npos) << e.what();
  }
}

// ---- On the GPU ----

TEST(Cuda, CnnStepMatchesTheDoubleReference) {
  Net net;
  build_cnn(net, {.kind = "sgd", .momentum = 0.9, .nesterov = true, .weight_decay = 5e-4, .clip_grad_norm = 0.5});
  const Inputs in = draw_inputs(net.g, 3, 5);
  std::vector<ValueId> vs = kept_values(net.g);
  // Step 0's gradients and the parameters after 3 steps.
  const Values gpu = run_steps(net.g, Backend::Cuda, in, vs, 3);
  const Values ref = run_steps(net.g, Backend::Reference64, in, vs, 3);
  expect_close(net.g, gpu, ref);
}

TEST(Cuda, AdamWStepMatchesTheDoubleReference) {
  Net net;
  build_cnn(net, {.kind = "adamw", .weight_decay = 0.01});
  const Inputs in = draw_inputs(net.g, 4, 5);
  std::vector<ValueId> vs = kept_values(net.g);
  std::vector<double> lg, lr;
  const Values gpu = run_steps(net.g, Backend::Cuda, in, vs, 3, &lg, net.loss);
  const Values ref = run_steps(net.g, Backend::Reference64, in, vs, 3, &lr, net.loss);
  // Adam divides by sqrt(v) + 1e-8: a gradient element near zero makes the
  // update sensitive to its rounding; the parameters are held to the bound
  // after the first step's (|update| <= lr per element).
  expect_close(net.g, gpu, ref, 1e-3);
  for (size_t s = 0; s < lg.size(); ++s) EXPECT_NEAR(lg[s], lr[s], 1e-5 * std::abs(lr[s])) << "loss at step " << s;
}

// The forward values, the max-pool indices and the dropout mask of one step
// against the f32 reference: the integers equal.
TEST(Cuda, MaxPoolIndicesAndDropoutMasksEqualTheReference) {
  Net net;
  build_cnn(net, {.kind = "sgd"});
  const Graph& g = net.g;
  const Inputs in = draw_inputs(g, 5, 5);
  auto ints = [&](Backend b) {
    const std::unique_ptr<Executor> exp = ready(g, b, in, true);
    Executor& ex = *exp;
    kernels::StepContext ctx;
    ctx.seed = 99;
    ctx.step = 4;
    ctx.row0 = 6;
    ex.run(ctx);
    std::map<ValueId, std::vector<uint8_t>> r;
    for (const Node& n : g.nodes())
      if (n.op == "max_pool2d" || n.op == "dropout") {
        const ValueId v = n.outputs[1];
        auto& bytes = r[v];
        bytes.resize(ex.value_bytes(v));
        ex.fetch(v, bytes.data(), bytes.size());
      }
    return r;
  };
  const auto gpu = ints(Backend::Cuda), ref = ints(Backend::Reference);
  ASSERT_EQ(gpu.size(), 2u);
  for (const auto& [v, bytes] : ref) EXPECT_TRUE(gpu.at(v) == bytes) << g.value(v).name << " differs";
}

// Every activation kind and average pooling (padded, with and without the
// padding counted) in a training step against the double reference.
TEST(Cuda, ActivationsAndAveragePoolingMatchTheDoubleReference) {
  Graph g;
  Builder b(g);
  const ValueId x = g.input("x", {2, 3, 9, 7}), y = g.input("y", {2}, DType::i32);
  ValueId h = conv2d(b, x, 8, 3, {.pad = 1, .name = "conv1"});
  const std::vector<std::pair<std::string, Attrs>> kinds = {
      {"sigmoid", {}},         {"tanh", {}},      {"silu", {}},
      {"clip", {{"min", -0.5}, {"max", 0.5}}}, {"hardsigmoid", {}}, {"hardswish", {}},
      {"leaky_relu", {{"alpha", 0.1}}},        {"elu", {{"alpha", 0.7}}}};
  for (const auto& [kind, attrs] : kinds) h = activation(b, h, kind, attrs);
  h = avg_pool2d(b, h, 3, {.stride = 2, .pad = 1, .count_include_pad = false});
  h = avg_pool2d(b, h, 2, {.stride = 1, .pad = 1});
  h = global_avg_pool(b, h);
  const ValueId loss = softmax_xent(b, linear(b, h, 4, {.name = "fc"}), y);
  build_backward(g, loss);
  append_optimizer(g, {.kind = "sgd", .momentum = 0.9});
  const Inputs in = draw_inputs(g, 9, 4);
  const std::vector<ValueId> vs = kept_values(g);
  expect_close(g, run_steps(g, Backend::Cuda, in, vs, 2), run_steps(g, Backend::Reference64, in, vs, 2));
}

// Batched matmul in every transposition and broadcast, forward only.
TEST(Cuda, MatmulMatchesTheReference) {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (int bcast = 0; bcast < 2; ++bcast) {
        Graph g;
        Builder b(g);
        const int64_t B = 3, M = 5, K = 7, N = 6;
        const Shape as = ta ? Shape{B, K, M} : Shape{B, M, K};
        const Shape bs = bcast ? (tb ? Shape{N, K} : Shape{K, N}) : (tb ? Shape{B, N, K} : Shape{B, K, N});
        const ValueId a = g.input("a", as), c = g.input("c", bs);
        const ValueId y = matmul(b, a, c, ta != 0, tb != 0);
        g.value(y).is_output = true;
        const Inputs in = draw_inputs(g, 8, 1);
        const Values gpu = run_steps(g, Backend::Cuda, in, {y}, 1);
        const Values ref = run_steps(g, Backend::Reference64, in, {y}, 1);
        SCOPED_TRACE("trans_a " + std::to_string(ta) + " trans_b " + std::to_string(tb) + " broadcast " +
                     std::to_string(bcast));
        expect_close(g, gpu, ref, 1e-5);
      }
}

// Two runs give the same bits, and a run split in two executors (the
// state copied out and in, as a checkpoint does) continues exactly.
TEST(Cuda, StepsAreDeterministicAndResumeIsExact) {
  Net net;
  build_cnn(net, {.kind = "adam"});
  const Graph& g = net.g;
  const Inputs in = draw_inputs(g, 6, 5);
  std::vector<ValueId> state;
  for (ValueId v : kept_values(g))
    if (g.value(v).cls != VClass::ParamGrad) state.push_back(v);
  auto steps = [&](Executor& ex, int from, int to) {
    kernels::StepContext ctx;
    ctx.seed = 5;
    ctx.lr = 1e-3;
    for (int s = from; s < to; ++s) {
      ctx.step = s;
      ex.run(ctx);
    }
  };
  Values once, again, resumed;
  for (Values* out : {&once, &again}) {
    const auto ex = ready(g, Backend::Cuda, in);
    steps(*ex, 0, 6);
    *out = read(*ex, state);
  }
  {
    Values half;
    {
      const auto ex = ready(g, Backend::Cuda, in);
      steps(*ex, 0, 3);
      half = read(*ex, state);
    }
    // A fresh executor holding the state of step 3, as a checkpoint restores it.
    const auto ex = ready(g, Backend::Cuda, in);
    for (const auto& [v, x] : half) ex->write_f32(v, x.data());
    steps(*ex, 3, 6);
    resumed = read(*ex, state);
  }
  for (ValueId v : state) {
    EXPECT_TRUE(std::memcmp(once.at(v).data(), again.at(v).data(), once.at(v).size() * 4) == 0)
        << g.value(v).name << " differs between two runs";
    EXPECT_TRUE(std::memcmp(once.at(v).data(), resumed.at(v).data(), once.at(v).size() * 4) == 0)
        << g.value(v).name << " differs after resuming";
  }
}

#ifdef MEMFIT_HAVE_CUDA
// One cudaMalloc per non-empty arena when the executor allocates, none in
// a step; the device's free memory drops by the arenas (cudaMalloc hands
// out 2 MiB pages) when they are allocated, and, once the first step has
// loaded its kernels' code (CUDA loads modules lazily), not at all while
// steps run.
TEST(Cuda, ArenasAreTheOnlyDeviceMemoryAndStepsAllocateNone) {
  train::StepSpec spec;
  spec.model = "convnet";
  spec.batch = 64;
  spec.optimizer.kind = "adam";
  auto sg = train::build_step_graph(spec);
  const Graph& g = sg->g;
  ExecConfig cfg;
  cfg.backend = Backend::Cuda;
  cfg.defer_allocation = true;
  Executor ex(g, cfg);
  auto free_now = [] {
    size_t f = 0, t = 0;
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemGetInfo(&f, &t), cudaSuccess);
    return f;
  };
  const size_t free0 = free_now();
  const size_t allocs0 = cuda_arena_allocations();
  ex.allocate();
  int arenas = 0;
  size_t rounded = 0;
  constexpr size_t kPage = size_t(2) << 20;
  for (size_t a = 0; a < kNumArenas; ++a)
    if (ex.plan().arena_bytes[a]) {
      ++arenas;
      rounded += (ex.plan().arena_bytes[a] + kPage - 1) / kPage * kPage;
    }
  EXPECT_EQ(cuda_arena_allocations() - allocs0, static_cast<size_t>(arenas));
  const size_t free1 = free_now();
  const size_t taken = free0 - free1;
  // A small arena may land in a page the process already holds.
  EXPECT_GE(taken + kPage, ex.arena_bytes());
  EXPECT_LE(taken, rounded + kPage) << "device memory beyond the planned arenas";
  ex.init_params(1);
  std::vector<float> x(static_cast<size_t>(numel(g.value(sg->x).shape)), 0.5f);
  std::vector<int32_t> y(static_cast<size_t>(numel(g.value(sg->labels).shape)), 3);
  ex.write_f32(sg->x, x.data());
  ex.feed(sg->labels, y.data(), y.size() * 4);
  kernels::StepContext ctx;
  ctx.lr = 1e-3;
  ex.run(ctx);
  const size_t free2 = free_now();
  for (int s = 1; s < 6; ++s) {
    ctx.step = s;
    ex.run(ctx);
  }
  const size_t free3 = free_now();
  std::printf("plan: %zu bytes in %d arenas (%zu in 2 MiB pages); cudaMemGetInfo: %zu bytes taken by allocate(), "
              "%zd more by the first step (kernel code loaded), %zd by the next five\n",
              ex.arena_bytes(), arenas, rounded, taken, static_cast<ptrdiff_t>(free1) - static_cast<ptrdiff_t>(free2),
              static_cast<ptrdiff_t>(free2) - static_cast<ptrdiff_t>(free3));
  EXPECT_EQ(cuda_arena_allocations() - allocs0, static_cast<size_t>(arenas)) << "a step allocated an arena";
  EXPECT_EQ(free3, free2) << "device memory changed while steps ran";
}
#endif

// `memfit train --device cuda`: a plan of GPU memory against the GPU's
// free memory, the training loss falling on a learnable dataset, the
// device memory the run took within the plan plus the driver's page
// rounding, and a run stopped after a checkpoint and resumed ending with
// the same bits as one run straight through.
TEST(CudaTrain, TheCommandTrainsPlansGpuMemoryAndResumesExactly) {
  using memfit::testing::TempDir;
  TempDir d("cuda_train");
  // 640 training and 128 test images of 28 x 28: class k is a bright band at rows 2k..2k+4.
  for (const auto& [split, n] : {std::pair<std::string, uint32_t>{"train", 640}, {"t10k", 128}}) {
    std::vector<uint8_t> labels(n);
    for (uint32_t i = 0; i < n; ++i) labels[i] = static_cast<uint8_t>((i * 7) % 10);
    memfit::testing::write_bytes(d / (split + "-labels-idx1-ubyte"), memfit::testing::idx_labels(labels));
    memfit::testing::write_bytes(d / (split + "-images-idx3-ubyte"),
                                 memfit::testing::idx_images(n, 28, 28, [&](uint32_t i) {
                                   const uint32_t img = i / 784, row = i % 784 / 28;
                                   const uint32_t k = labels[img];
                                   return static_cast<uint8_t>(row >= 2 * k && row < 2 * k + 5 ? 200 : (i * 31) % 40);
                                 }));
  }
  // A constant learning rate: a cosine schedule's length is the run's --steps,
  // so a run of 20 steps resumed to 40 would follow another schedule.
  const std::string common = "--device cuda --data " + d.path.string() +
                             " --batch 32 --optimizer adam --lr 1e-3 --schedule constant --seed 3 --eval-every 0 "
                             "--progress lines --json";
  auto run = [&](const std::string& args) {
    std::vector<std::string> argv{"train"};
    std::istringstream in(common + " " + args);
    for (std::string w; in >> w;) argv.push_back(w);
    return memfit::testing::run_memfit(argv);
  };
  const auto a = run("--steps 40 --out " + d / "a");
  ASSERT_EQ(a.exit_code, 0) << a.out << a.err;
  std::printf("%s", a.err.c_str());
  EXPECT_NE(a.err.find("predicted GPU peak"), std::string::npos) << a.err;
  const memfit::testing::Json j = memfit::testing::last_json(a.out);
  EXPECT_EQ(j.at("device").get<std::string>(), "cuda");
  EXPECT_EQ(j.at("steps").get<int64_t>(), 40);
  const size_t planned = j.at("device_planned_bytes").get<size_t>(), used = j.at("device_used_bytes").get<size_t>();
  std::printf("memfit train --device cuda: GPU memory planned %zu, used %zu (cudaMemGetInfo); loss %g; %.0f images/s "
              "(%.0f after the first step)\n",
              planned, used, j.at("final_train_loss").get<double>(), j.at("images_per_second").get<double>(),
              j.value("warm_images_per_second", 0.0));
  // Five arenas, each rounded to the driver's 2 MiB pages, plus the kernel code the first launches load.
  EXPECT_LE(used, planned + planned / 100 + (size_t(16) << 20)) << "the run took more GPU memory than planned";
  EXPECT_LT(j.at("final_train_loss").get<double>(), 1.5) << a.out;  // ln 10 = 2.30 at the start

  // 20 steps, then 20 more from the checkpoint: the same weights and state as 40 at once.
  const auto b1 = run("--steps 20 --out " + d / "b");
  ASSERT_EQ(b1.exit_code, 0) << b1.out << b1.err;
  const auto b2 = run("--steps 40 --out " + d / "b" + " --resume " + d / "b");
  ASSERT_EQ(b2.exit_code, 0) << b2.out << b2.err;
  EXPECT_NE(b2.err.find("resumed from"), std::string::npos) << b2.err;
  memfit::testing::expect_same_tensors(d / "a/model.safetensors", d / "b/model.safetensors");
  memfit::testing::expect_same_tensors(d / "a/checkpoint.safetensors", d / "b/checkpoint.safetensors");
}

// A GPU budget below what the plan needs: the fit finds a policy that fits
// it (micro-batches, recomputation, update in backward), and the run under
// it takes no more GPU memory than the budget.
TEST(CudaTrain, TheFitKeepsAResNetInsideASmallGpuBudget) {
  using memfit::testing::TempDir;
  TempDir d("cuda_fit");
  for (const auto& [split, n] : {std::pair<std::string, uint32_t>{"train", 1024}, {"t10k", 128}}) {
    std::vector<uint8_t> labels(n);
    for (uint32_t i = 0; i < n; ++i) labels[i] = static_cast<uint8_t>(i % 10);
    memfit::testing::write_bytes(d / (split + "-labels-idx1-ubyte"), memfit::testing::idx_labels(labels));
    memfit::testing::write_bytes(d / (split + "-images-idx3-ubyte"),
                                 memfit::testing::idx_images(n, 28, 28, [](uint32_t i) { return uint8_t(i * 13); }));
  }
  const std::string base = "--device cuda --model resnet18 --batch 256 --data " + d.path.string() + " --json";
  auto run = [&](const std::string& cmd, const std::string& args) {
    std::vector<std::string> argv{cmd};
    std::istringstream in(base + " " + args);
    for (std::string w; in >> w;) argv.push_back(w);
    return memfit::testing::run_memfit(argv);
  };
  const auto whole = run("plan", "");
  ASSERT_EQ(whole.exit_code, 0) << whole.out << whole.err;
  const size_t need = memfit::testing::json_uint(whole.out, "total_bytes");
  const size_t budget = need * 6 / 10;
  const std::string flag = "--device-memory " + std::to_string(budget);
  const auto fitted = run("plan", flag);
  ASSERT_EQ(fitted.exit_code, 0) << fitted.out << fitted.err;
  const size_t planned = memfit::testing::json_uint(fitted.out, "total_bytes");
  std::printf("resnet18 b256 on the GPU: %zu bytes unconstrained; budget %zu: planned %zu\n%s", need, budget, planned,
              fitted.err.c_str());
  EXPECT_LE(planned, budget);
  const auto t = run("train", flag + " --steps 3 --eval-every 0 --out " + d / "run");
  ASSERT_EQ(t.exit_code, 0) << t.out << t.err;
  const memfit::testing::Json j = memfit::testing::last_json(t.out);
  std::printf("trained 3 steps: GPU memory used %zu of the budget %zu\n", j.at("device_used_bytes").get<size_t>(), budget);
  EXPECT_LE(j.at("device_used_bytes").get<size_t>(), budget);
}

// The zoo's ConvNet on the GPU reproduces PyTorch's step-0 logits, loss and
// gradients and its 20-step losses (tests/golden_check.hpp: the CPU's
// tolerances).
TEST(CudaGolden, ConvNet) { run_golden({"convnet", "convnet.safetensors", "fc2.weight", 1e-4, 0.0}, Backend::Cuda); }
// ResNet-18 (batch norm, residual additions): the CPU's tolerances, ReLU
// units that switch against float64 in the GPU's own fp32 forward found as
// the CPU test finds its own.
TEST(CudaGolden, ResNet18) {
  run_golden({"resnet18", "resnet18.safetensors", "fc.weight", 1e-3, 0.0, true}, Backend::Cuda);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const char* lowering = std::getenv("MEMFIT_TEST_CUDA_LOWERING");
  if (lowering && std::string(lowering) == "1") {
    ::testing::GTEST_FLAG(filter) = "CudaLowering.*";
    return RUN_ALL_TESTS();
  }
  const std::string why = cuda_unavailable_reason();
  if (!why.empty()) {
    std::printf("skipped: %s (the CUDA tests need a GPU)\n", why.c_str());
    return 77;
  }
  return RUN_ALL_TESTS();
}
