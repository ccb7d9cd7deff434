// bf16 master weights (--master-weights bf16, Graph::weight_storage).
//  - The graph stores every weight of rank >= 2 in bf16 and keeps vectors
//    (biases, norms) and every parameter's gradient in f32.
//  - The fast CPU update kernels store the same bf16 weights as the
//    reference kernels (the stochastic rounding is a function of seed, step,
//    parameter name and element), for every optimizer and state format.
//  - Stochastic rounding keeps updates far below half an ulp: their
//    expectation is the f32 update's.
//  - Linear and convolution layers read a bf16 weight themselves where they
//    can, and between conversions elsewhere, with the reference's result.
//  - gpt-tiny trains with bf16 master weights close to fp32 (the accuracy
//    cost, printed), and the plan's parameter class is the bf16 bytes.
//  - Through the binary: the weights file holds bf16 matrices, a run resumes
//    bit-identical, another --master-weights is refused naming the flag,
//    and generate reads the bf16 weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cli_util.hpp"
#include "io/safetensors.hpp"
#include "kernels/bf16.hpp"
#include "kernels/kernel.hpp"
#include "kernels/optim_state.hpp"
#include "memfit/optim.hpp"
#include "memfit/plan.hpp"
#include "memfit/rng.hpp"
#include "memfit/runtime.hpp"
#include "same_tensors.hpp"
#include "compile/step_graph.hpp"
#include "gpt_tiny_markov.hpp"

using namespace memfit;
namespace q = memfit::kernels::qstate;

namespace {

// Parameters of the given shapes stored as Graph::weight_storage says, f32
// gradients the test writes, and the optimizer's update node over them.
struct UpdateGraph {
  Graph g;
  std::vector<ValueId> params, grads;
  UpdateGraph(const std::vector<Shape>& shapes, const OptimizerConfig& oc) {
    g.weight_storage = DType::bf16;
    for (const Shape& s : shapes) {
      const std::string name = "p" + std::to_string(params.size());
      const ValueId p = g.param(name, s);
      Value gv;
      gv.name = name + ".grad";
      gv.shape = s;
      gv.cls = VClass::ParamGrad;
      gv.grad_of = p;
      const ValueId gid = g.add_value(gv);
      g.value(p).grad = gid;
      params.push_back(p);
      grads.push_back(gid);
    }
    append_optimizer(g, oc);
  }
};

float test_value(uint64_t seed, int64_t i, float scale) {
  return rng::uniform_sym(rng::stream_key(seed, 91, 0), static_cast<uint64_t>(i), scale);
}

size_t count(const Executor& ex, ValueId v) { return static_cast<size_t>(numel(ex.graph().value(v).shape)); }

// Writes values of the test's stream into v, bf16 (rounded to nearest) or f32.
void fill(Executor& ex, ValueId v, uint64_t seed, float scale, float offset = 0.0f) {
  std::vector<float> x(count(ex, v));
  for (size_t i = 0; i < x.size(); ++i) x[i] = offset + test_value(seed, static_cast<int64_t>(i), scale);
  if (ex.graph().value(v).dtype == DType::bf16) {
    for (size_t i = 0; i < x.size(); ++i) ex.ptr<kernels::bf16_t>(v)[i] = kernels::f32_to_bf16(x[i]);
  } else {
    ex.write_f32(v, x.data());
  }
}

// v as f32, whatever its storage (bf16 widened exactly).
std::vector<float> read(Executor& ex, ValueId v) {
  std::vector<float> x(count(ex, v));
  if (ex.graph().value(v).dtype == DType::bf16) {
    for (size_t i = 0; i < x.size(); ++i) x[i] = kernels::bf16_to_f32(ex.ptr<kernels::bf16_t>(v)[i]);
  } else {
    ex.read_f32(v, x.data());
  }
  return x;
}

ExecConfig config(Backend b) {
  ExecConfig c;
  c.backend = b;
  c.verify = true;
  return c;
}

// One bf16 ulp at x (the spacing of bf16 values around it).
double bf16_ulp(double x) {
  const double a = std::max(std::abs(x), 1e-30);
  return std::ldexp(1.0, static_cast<int>(std::floor(std::log2(a))) - 7);
}

}  // namespace

// Matrices bf16, vectors f32; the update node's kernels on both backends
// take them.
TEST(MasterWeights, MatricesAreStoredInBf16AndVectorsInF32) {
  OptimizerConfig oc;
  oc.kind = "adamw";
  UpdateGraph u({{40, 3}, {7}, {2, 3, 4}}, oc);
  EXPECT_EQ(u.g.value(u.params[0]).dtype, DType::bf16);
  EXPECT_EQ(u.g.value(u.params[1]).dtype, DType::f32);
  EXPECT_EQ(u.g.value(u.params[2]).dtype, DType::bf16);
  // A buffer (batch-norm statistics) is not a weight.
  Graph g;
  g.weight_storage = DType::bf16;
  EXPECT_EQ(g.value(g.buffer("running", {4, 4})).dtype, DType::f32);
}

// The fast kernels store the reference's bf16 weights: the same f32 update
// rounded with the same random bits. The two compute the f32 update in a
// different order of operations in a few elements (vectorised and fused
// multiply-adds), which moves the value by an f32 rounding and can change
// its stochastic rounding by one bf16 ulp: at most 1% of the elements, each
// by one ulp. Moments as in test_optim_state.
TEST(MasterWeights, CpuKernelsMatchTheReference) {
  const std::vector<Shape> shapes = {{300, 7}, {17, 3}, {4096}, {2, 2048}, {5}};
  struct Case {
    std::string kind, state;
    double momentum;
  };
  const std::vector<Case> cases = {{"sgd", "fp32", 0.0},   {"sgd", "fp32", 0.9},  {"sgd", "8bit", 0.9},
                                   {"adam", "fp32", 0.9},  {"adamw", "fp32", 0.9}, {"adamw", "bf16", 0.9},
                                   {"adamw", "8bit", 0.9}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.kind + " " + c.state + " momentum " + std::to_string(c.momentum));
    OptimizerConfig oc;
    oc.kind = c.kind;
    oc.state = c.state;
    oc.momentum = c.momentum;
    oc.weight_decay = c.kind == "adamw" ? 0.1 : 1e-3;
    UpdateGraph u(shapes, oc);
    std::vector<std::unique_ptr<Executor>> ex;
    for (Backend b : {Backend::Cpu, Backend::Reference}) {
      ex.push_back(std::make_unique<Executor>(u.g, config(b)));
      ex.back()->init_params(1);
      for (size_t t = 0; t < shapes.size(); ++t) fill(*ex.back(), u.params[t], 10 + t, 1.0f);
    }
    const size_t node = u.g.num_nodes() - 1;
    const std::string op = c.kind == "sgd" ? "sgd_update" : "adam_update";
    EXPECT_EQ(std::string(ex[0]->kernel_name(node)), "cpu." + op);
    EXPECT_EQ(std::string(ex[1]->kernel_name(node)), "ref." + op);
    kernels::StepContext ctx;
    ctx.lr = 1e-2;
    ctx.grad_scale = 0.7;
    ctx.seed = 9;
    std::vector<std::vector<float>> before(shapes.size());
    for (size_t t = 0; t < shapes.size(); ++t) before[t] = read(*ex[0], u.params[t]);
    for (int step = 0; step < 4; ++step) {
      ctx.step = step;
      for (auto& e : ex) {
        for (size_t t = 0; t < shapes.size(); ++t) fill(*e, u.grads[t], 100 * step + t, 0.05f);
        e->run(ctx);
      }
    }
    for (size_t t = 0; t < shapes.size(); ++t) {
      const std::vector<float> wc = read(*ex[0], u.params[t]), wr = read(*ex[1], u.params[t]);
      size_t differ = 0, moved = 0;
      for (size_t i = 0; i < wc.size(); ++i) {
        moved += wr[i] != before[t][i];
        if (wc[i] == wr[i]) continue;
        ++differ;
        ASSERT_LE(std::abs(double(wc[i]) - double(wr[i])), 1.0001 * bf16_ulp(wr[i])) << "p" << t << "[" << i << "]";
      }
      EXPECT_LE(differ, wc.size() / 100 + 1) << "p" << t << ": " << differ << " of " << wc.size() << " differ";
      // The update did something: four steps of lr 1e-2 move a weight by
      // 0.1 to 1 ulp in expectation (SGD's 3.5e-4 a step, Adam's up to
      // 1e-2), so stochastic rounding moves at least a tenth of them.
      EXPECT_GT(moved, wc.size() / 10) << "p" << t;
    }
  }
}

// SGD without momentum, w = 0.75 and g = 1 in 8192 bf16 weights, lr 1e-4:
// each step moves a weight by 1e-4, p = 2.6% of its ulp (2^-8 = 0.0039 in
// [0.5, 1)), which rounding to nearest would drop every time. Stochastic
// rounding is unbiased, so after 100 steps the mean weight is 0.74 up to
// the rounding noise: per element and step a variance of p (1 - p) ulp^2,
// after 100 steps a std of 1.6 ulp per element and of 0.018 ulp (7e-5) for
// the mean of 8192; the bound 5e-4 is seven of those. No weight rises above
// 0.75 (each step rounds between the weight and the next value below), and
// none falls 16 ulp (ten of its std) below 0.74.
TEST(MasterWeights, StochasticRoundingKeepsUpdatesFarBelowAnUlp) {
  OptimizerConfig oc;
  oc.kind = "sgd";
  oc.momentum = 0.0;
  oc.weight_decay = 0.0;
  UpdateGraph u({{2, 4096}}, oc);
  for (Backend b : {Backend::Cpu, Backend::Reference}) {
    SCOPED_TRACE(backend_name(b));
    Executor ex(u.g, config(b));
    ex.init_params(1);
    for (size_t i = 0; i < 8192; ++i) ex.ptr<kernels::bf16_t>(u.params[0])[i] = kernels::f32_to_bf16(0.75f);
    const std::vector<float> ones(8192, 1.0f);
    kernels::StepContext ctx;
    ctx.lr = 1e-4;
    ctx.seed = 5;
    for (int step = 0; step < 100; ++step) {
      ctx.step = step;
      ex.write_f32(u.grads[0], ones.data());
      ex.run(ctx);
    }
    const std::vector<float> w = read(ex, u.params[0]);
    double sum = 0, lo = 1, hi = 0;
    for (float x : w) {
      sum += x;
      lo = std::min<double>(lo, x);
      hi = std::max<double>(hi, x);
    }
    const double mean = sum / static_cast<double>(w.size());
    std::printf("%s: mean weight after 100 steps %.6f (expected 0.74, f32 0.740000, nearest 0.75), range [%g, %g]\n",
                backend_name(b), mean, lo, hi);
    EXPECT_NEAR(mean, 0.74, 5e-4);
    EXPECT_GE(lo, 0.74 - 16 * 0.0039);
    EXPECT_LE(hi, 0.75);
  }
}

namespace {

// One layer over x (activations of type act) and a bf16 weight: linear
// (x [64, 96], w [48, 96], b [48]) or conv2d (x [4, 32, 10, 10], w [32, 32,
// 3, 3], b [32], padding 1).
struct LayerGraph {
  Graph g;
  ValueId x, w, b, y;
  LayerGraph(const std::string& op, DType act) {
    g.weight_storage = DType::bf16;
    Attrs a;
    if (op == "linear") {
      x = g.input("x", {64, 96}, act);
      w = g.param("l.weight", {48, 96});
      b = g.param("l.bias", {48});
    } else {
      x = g.input("x", {4, 32, 10, 10}, act);
      w = g.param("l.weight", {32, 32, 3, 3});
      b = g.param("l.bias", {32});
      a = {{"stride", Shape{1, 1}}, {"pad", Shape{1, 1}}, {"dilation", Shape{1, 1}}, {"groups", int64_t(1)}};
    }
    y = g.add1(op, {x, w, b}, a, "l");
    g.value(y).is_output = true;
  }
};

}  // namespace

// A linear or convolution layer's forward with a bf16 weight, under bf16
// and under f32 activations: the CPU's kernel (reading the bf16 weight
// itself where it can, between conversions elsewhere) against the reference
// (between conversions). Both multiply the same bf16 values exactly and add
// in f32 (in different orders: f32 roundings, about 1e-6 relative), so bf16
// outputs differ by at most one bf16 rounding (2^-8 relative) and f32
// outputs by 1e-5 of their scale (outputs here are about 1).
TEST(MasterWeights, LayersReadBf16WeightsAsTheReferenceDoes) {
  for (const std::string op : {"linear", "conv2d"})
    for (DType act : {DType::bf16, DType::f32}) {
      SCOPED_TRACE(op + " " + dtype_name(act));
      LayerGraph lg(op, act);
      ASSERT_EQ(lg.g.value(lg.w).dtype, DType::bf16);
      ASSERT_EQ(lg.g.value(lg.b).dtype, DType::f32);
      std::vector<std::vector<float>> ys;
      for (Backend bk : {Backend::Cpu, Backend::Reference}) {
        Executor ex(lg.g, config(bk));
        ex.init_params(1);
        fill(ex, lg.x, 1, 1.0f);
        fill(ex, lg.w, 2, 0.1f);
        fill(ex, lg.b, 3, 0.1f);
        ex.run(kernels::StepContext{});
        std::printf("%s %s %s: %s\n", backend_name(bk), op.c_str(), dtype_name(act), ex.kernel_name(0));
        ys.push_back(read(ex, lg.y));
      }
      double scale = 0;
      for (float v : ys[1]) scale = std::max(scale, std::abs(double(v)));
      ASSERT_GT(scale, 0.1);
      for (size_t i = 0; i < ys[0].size(); ++i) {
        const double tol = act == DType::bf16 ? 1.0001 * bf16_ulp(ys[1][i]) : 1e-5 * scale;
        ASSERT_LE(std::abs(double(ys[0][i]) - double(ys[1][i])), tol) << i << ": " << ys[0][i] << " vs " << ys[1][i];
      }
    }
}

// ---------------------------------------------------------------- gpt-tiny

namespace {

using memfit::testing::feed_markov;
using memfit::testing::gpt_tiny;
using memfit::testing::kB;
using memfit::testing::kT;
using memfit::testing::kVocab;

// Mean loss of the last 20 of `steps` steps.
double trained_loss(const train::StepSpec& spec, int steps, double lr, double* first = nullptr) {
  const auto sg = train::build_step_graph(spec);
  Executor ex(sg->g, ExecConfig{});
  ex.init_params(1);
  kernels::StepContext ctx;
  ctx.lr = lr;
  ctx.seed = 1;
  double tail = 0;
  for (int step = 0; step < steps; ++step) {
    feed_markov(ex, *sg, step);
    ctx.step = step;
    ex.run(ctx);
    const double l = ex.fetch_scalar(sg->loss);
    if (step == 0 && first) *first = l;
    if (step >= steps - 20) tail += l;
  }
  return tail / 20;
}

OptimizerConfig adamw() {
  OptimizerConfig oc;
  oc.kind = "adamw";
  oc.weight_decay = 1e-2;
  return oc;
}

}  // namespace

// The step graph: matrices bf16, vectors f32, every gradient f32; the
// parameter arena holds 2 bytes per matrix element and 4 per vector element.
TEST(MasterWeights, StepGraphAndPlan) {
  const auto sg = train::build_step_graph(gpt_tiny(adamw(), DType::bf16));
  const Graph& g = sg->g;
  size_t matrices = 0, vectors = 0, bytes = 0;
  for (ValueId p : g.params()) {
    const Value& v = g.value(p);
    ASSERT_EQ(v.dtype, v.shape.size() >= 2 ? DType::bf16 : DType::f32) << v.name;
    (v.shape.size() >= 2 ? matrices : vectors) += static_cast<size_t>(numel(v.shape));
    bytes += v.bytes();
    if (v.trainable) {
      ASSERT_NE(v.grad, kNone) << v.name;
      EXPECT_EQ(g.value(v.grad).dtype, DType::f32) << v.name;
    }
  }
  EXPECT_GT(matrices, 10 * vectors);
  EXPECT_EQ(bytes, 2 * matrices + 4 * vectors);
  // The parameter arena: those bytes, each tensor aligned to 64.
  ExecConfig cfg;
  cfg.defer_allocation = true;
  Executor ex(g, cfg);
  const size_t arena = ex.plan().arena_bytes[static_cast<size_t>(Arena::Params)];
  EXPECT_GE(arena, bytes);
  EXPECT_LT(arena, bytes + 64 * g.params().size());
}

// 300 steps of AdamW (lr 3e-3) on the Markov windows: bf16 master weights
// learn as fp32 weights do. The bound is 1% on the mean loss of the last 20
// steps, the one compact optimizer state meets (test_optim_state): an
// update of lr 3e-3 is 0.4 to 3 ulp of gpt-tiny's weights, so stochastic
// rounding adds noise but no bias (the cost measured is printed). Under
// bf16 activations too.
TEST(MasterWeights, GptTinyTrainsCloseToFp32Weights) {
  const double lr = 3e-3;
  double first32 = 0, first16 = 0;
  for (DType act : {DType::f32, DType::bf16}) {
    const double ref = trained_loss(gpt_tiny(adamw(), DType::f32, act), 300, lr, &first32);
    const double l = trained_loss(gpt_tiny(adamw(), DType::bf16, act), 300, lr, &first16);
    const double rel = (l - ref) / ref;
    std::printf("activations %s: fp32 weights %.4f -> %.4f, bf16 weights %.4f -> %.4f (%+.2f%%)\n", dtype_name(act),
                first32, ref, first16, l, 100 * rel);
    EXPECT_LT(ref, 0.75 * first32);
    EXPECT_LT(std::abs(rel), 0.01) << "bf16 weights " << l << " vs fp32 " << ref;
    // The initial weights differ only by their rounding to bf16.
    EXPECT_NEAR(first16, first32, 0.01 * first32);
  }
}

// ---------------------------------------------------------------- the binary

namespace {

using memfit::testing::write_fox_corpus;

std::string lm_args(const std::string& corpus, int steps) {
  return " --model gpt-tiny --data " + corpus + " --block-size 32 --batch 4 --steps " + std::to_string(steps) +
         " --checkpoint-every 100 --eval-every 0 --threads 1 --seed 3 --progress lines --optimizer adamw"
         " --schedule constant --master-weights bf16";
}

}  // namespace

// 200 steps in one run, and 100 + --resume to 200 in another (a constant
// learning rate: the schedule does not depend on --steps), end
// bit-identical; the weights file holds bf16 matrices; a resume with fp32
// weights is refused naming the flag; generate samples from the run, and
// --init-from converts between the storages.
TEST(MasterWeights, RunResumesBitIdenticalAndGenerates) {
  using memfit::testing::run_memfit;
  using memfit::testing::temp_dir;
  const std::string corpus = write_fox_corpus(temp_dir("mw-data"));
  const std::string a = temp_dir("mw-a"), b = temp_dir("mw-b");
  auto full = run_memfit("train" + lm_args(corpus, 200) + " --out " + a);
  ASSERT_EQ(full.code, 0) << full.out;
  auto half = run_memfit("train" + lm_args(corpus, 100) + " --out " + b);
  ASSERT_EQ(half.code, 0) << half.out;
  auto rest = run_memfit("train" + lm_args(corpus, 200) + " --out " + b + " --resume " + b);
  ASSERT_EQ(rest.code, 0) << rest.out;
  EXPECT_NE(rest.out.find("resumed from"), std::string::npos) << rest.out;
  memfit::testing::expect_same_tensors(a + "/model.safetensors", b + "/model.safetensors");
  memfit::testing::expect_same_tensors(a + "/checkpoint.safetensors", b + "/checkpoint.safetensors");

  const io::SafetensorsFile f = io::SafetensorsFile::load(a + "/model.safetensors");
  const io::TensorInfo* wte = f.find("transformer.wte.weight");
  const io::TensorInfo* ln = f.find("transformer.ln_f.weight");
  ASSERT_TRUE(wte && ln);
  EXPECT_EQ(wte->dtype, io::DType::BF16);
  EXPECT_EQ(ln->dtype, io::DType::F32);

  auto other = run_memfit("train" + lm_args(corpus, 300) + " --master-weights fp32 --out " + b + " --resume " + b);
  EXPECT_NE(other.code, 0) << other.out;
  EXPECT_NE(other.out.find("its weights are stored as bf16, this run's as fp32; pass --master-weights bf16"),
            std::string::npos)
      << other.out;

  auto gen = run_memfit("generate --run " + a + " --prompt 'the ' --tokens 20 --threads 1");
  EXPECT_EQ(gen.code, 0) << gen.out;

  // --init-from reads F32 weights into bf16 storage and BF16 into fp32.
  const std::string c = temp_dir("mw-c"), d = temp_dir("mw-d");
  auto into32 = run_memfit("train" + lm_args(corpus, 1) + " --master-weights fp32 --init-from " + a +
                           "/model.safetensors --out " + c);
  ASSERT_EQ(into32.code, 0) << into32.out;
  EXPECT_NE(into32.out.find("initialised "), std::string::npos) << into32.out;
  auto into16 = run_memfit("train" + lm_args(corpus, 1) + " --init-from " + c + "/model.safetensors --out " + d);
  ASSERT_EQ(into16.code, 0) << into16.out;
  EXPECT_EQ(io::SafetensorsFile::load(c + "/model.safetensors").find("transformer.wte.weight")->dtype, io::DType::F32);

  auto ada = run_memfit("train" + lm_args(corpus, 10) + " --optimizer adafactor --out " + temp_dir("mw-ada"));
  EXPECT_NE(ada.code, 0);
  EXPECT_NE(ada.out.find("--master-weights bf16 takes sgd, adam or adamw"), std::string::npos) << ada.out;
}
