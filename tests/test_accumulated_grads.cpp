// bf16 accumulated gradients (--accumulated-grads bf16, StepPolicy::
// accumulated_grads): gradient accumulation keeping the sum over the
// micro-batches in bf16, each micro-batch's f32 gradient added in f32 and
// the sum rounded stochastically.
//  - One grad_accumulate: within the rounding bound of the exact sum, the
//    error without bias over many elements, the CPU kernel storing the
//    reference's bytes, and a function of (seed, step, micro-batch,
//    parameter): rerun, it stores the same bytes.
//  - The optimizer kernels read bf16 gradients: the fast ones as the
//    reference, for every optimizer and state format, with clipping.
//  - gpt-tiny with 4 micro-batches per step learns as with f32 accumulation
//    (the cost printed); the plan's gradient class is the bf16 bytes.
//  - Through the binary: a run resumes bit-identical, the plan says so, the
//    fit picks it only under --allow-approx, and what cannot take it is
//    refused naming the flag.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli_util.hpp"
#include "gpt_tiny_markov.hpp"
#include "kernels/bf16.hpp"
#include "kernels/kernel.hpp"
#include "kernels/optim_state.hpp"
#include "memfit/accumulate.hpp"
#include "memfit/optim.hpp"
#include "memfit/plan.hpp"
#include "memfit/rng.hpp"
#include "memfit/runtime.hpp"
#include "same_tensors.hpp"
#include "compile/step_graph.hpp"

using namespace memfit;
namespace q = memfit::kernels::qstate;

namespace {

float test_value(uint64_t seed, int64_t i, float scale) {
  return rng::uniform_sym(rng::stream_key(seed, 53, 0), static_cast<uint64_t>(i), scale);
}

ExecConfig config(Backend b) {
  ExecConfig c;
  c.backend = b;
  c.verify = true;
  return c;
}

// A parameter, its bf16 accumulated gradient and a grad_accumulate from an
// f32 micro-batch gradient the test writes (an input).
struct AccumulateGraph {
  Graph g;
  ValueId param, acc, micro;
  explicit AccumulateGraph(int64_t n) {
    param = g.param("w", {n});
    Value a;
    a.name = "w.grad";
    a.shape = {n};
    a.dtype = DType::bf16;
    a.cls = VClass::ParamGrad;
    a.grad_of = param;
    acc = g.add_value(a);
    g.value(param).grad = acc;
    micro = g.input("w.grad_micro", {n}, DType::f32);
    Attrs at;
    at.set("param", std::string("w"));
    g.add_node("grad_accumulate", {acc, micro}, std::move(at), "w", Phase::Backward);
  }
};

}  // namespace

// k = 8 micro-batches of gradients of mixed signs and scales into one bf16
// sum. Each stochastic rounding moves the running sum by less than one bf16
// spacing at it, at most 2^-7 of its magnitude (8 significant bits), so the
// stored sum is within 2^-7 sum_j |P_j| of the exact one (P_j: the partial
// sums; the bound is doubled for the drift of the rounded partials, second
// order for k = 8). The rounding is unbiased: the mean error over 2^16
// elements is within 5 standard errors of 0, where round-to-nearest of the
// same sums is biased by construction (the test's gradients sit 1/4 of a
// spacing above a bf16 value each time: nearest rounds every one down).
TEST(AccumulatedGrads, Bf16SumIsWithinItsRoundingAndUnbiased) {
  const int64_t n = 1 << 16, k = 8;
  AccumulateGraph u(n);
  Executor cpu(u.g, config(Backend::Cpu)), ref(u.g, config(Backend::Reference));
  EXPECT_EQ(std::string(cpu.kernel_name(0)), "cpu.grad_accumulate");
  EXPECT_EQ(std::string(ref.kernel_name(0)), "ref.grad_accumulate");
  for (Executor* e : {&cpu, &ref}) e->init_params(1);
  std::vector<double> exact(static_cast<size_t>(n), 0.0), partial_abs(static_cast<size_t>(n), 0.0);
  kernels::StepContext ctx;
  ctx.seed = 5;
  ctx.step = 3;
  std::vector<float> gm(static_cast<size_t>(n));
  for (int64_t m = 0; m < k; ++m) {
    // Element i: a magnitude between 1e-4 and 1 (over four decades), a sign.
    for (int64_t i = 0; i < n; ++i) {
      const float mag = std::pow(10.0f, -4.0f * (0.5f + 0.5f * test_value(100 + m, i, 1.0f)));
      gm[static_cast<size_t>(i)] = (i % 3 == 0 ? -1.0f : 1.0f) * mag;
      exact[static_cast<size_t>(i)] += gm[static_cast<size_t>(i)];
      partial_abs[static_cast<size_t>(i)] += std::abs(exact[static_cast<size_t>(i)]);
    }
    ctx.micro = m;
    for (Executor* e : {&cpu, &ref}) {
      e->feed(u.micro, gm.data(), gm.size() * sizeof(float));
      e->run(ctx);
    }
    ASSERT_EQ(std::memcmp(cpu.data(u.acc), ref.data(u.acc), static_cast<size_t>(n) * 2), 0)
        << "the CPU kernel stored other bytes than the reference after micro-batch " << m;
  }
  const kernels::bf16_t* acc = cpu.ptr<kernels::bf16_t>(u.acc);
  double err_sum = 0, err_sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double e = static_cast<double>(kernels::bf16_to_f32(acc[i])) - exact[static_cast<size_t>(i)];
    ASSERT_LE(std::abs(e), 2.0 * std::ldexp(partial_abs[static_cast<size_t>(i)], -7)) << "element " << i;
    // Relative to the sum's magnitude, so that every element weighs alike.
    const double r = e / (std::abs(exact[static_cast<size_t>(i)]) + 1e-3);
    err_sum += r;
    err_sq += r * r;
  }
  const double mean = err_sum / n, sd = std::sqrt(err_sq / n - mean * mean);
  std::printf("relative error of the bf16 sum: mean %.2e, sd %.2e (bound on the mean %.2e)\n", mean, sd,
              5 * sd / std::sqrt(double(n)));
  EXPECT_LT(std::abs(mean), 5 * sd / std::sqrt(double(n)));
  EXPECT_GT(sd, 0.0);

  // The same step again stores the same bytes; another step other bytes.
  std::vector<kernels::bf16_t> first(acc, acc + n);
  for (int64_t m = 0; m < k; ++m) {
    for (int64_t i = 0; i < n; ++i) {
      const float mag = std::pow(10.0f, -4.0f * (0.5f + 0.5f * test_value(100 + m, i, 1.0f)));
      gm[static_cast<size_t>(i)] = (i % 3 == 0 ? -1.0f : 1.0f) * mag;
    }
    ctx.micro = m;
    cpu.feed(u.micro, gm.data(), gm.size() * sizeof(float));
    cpu.run(ctx);
  }
  EXPECT_EQ(std::memcmp(first.data(), acc, static_cast<size_t>(n) * 2), 0) << "the rounding is not a function of the step";
}

// Round-to-nearest would be biased on the same kind of sums: a constant
// gradient of 1/4 spacing above a bf16 value, added 8 times to a sum that
// starts at that value, is dropped every time by nearest rounding and kept
// in expectation by stochastic rounding.
TEST(AccumulatedGrads, SmallAdditionsSurviveInExpectation) {
  const int64_t n = 1 << 14, k = 8;
  AccumulateGraph u(n);
  Executor cpu(u.g, config(Backend::Cpu));
  cpu.init_params(1);
  kernels::StepContext ctx;
  ctx.seed = 2;
  const float base = 1.0f, small = std::ldexp(1.0f, -7) / 4;  // a quarter of 1.0's spacing (2^-7)
  std::vector<float> gm(static_cast<size_t>(n));
  for (int64_t m = 0; m < k; ++m) {
    std::fill(gm.begin(), gm.end(), m == 0 ? base : small);
    ctx.micro = m;
    cpu.feed(u.micro, gm.data(), gm.size() * sizeof(float));
    cpu.run(ctx);
  }
  double mean = 0;
  for (int64_t i = 0; i < n; ++i) mean += kernels::bf16_to_f32(cpu.ptr<kernels::bf16_t>(u.acc)[i]);
  mean /= n;
  const double want = base + 7 * small;  // 1.0137; nearest rounding would keep 1.0
  // Each element's sum takes 7 roundings at a spacing of 2^-7, each of
  // variance at most spacing^2 / 4: sd per element <= 2^-7 sqrt(7) / 2 =
  // 0.0103, 5 standard errors over 2^14 elements 4.0e-4 (nearest rounding
  // would be 0.0137 off).
  EXPECT_NEAR(mean, want, 4.1e-4);
}

// ---------------------------------------------------------------- the update

namespace {

// Parameters of the given shapes with gradients of type `grad` the test
// writes, and the optimizer's update node over them.
struct UpdateGraph {
  Graph g;
  std::vector<ValueId> params, grads;
  UpdateGraph(const std::vector<Shape>& shapes, const OptimizerConfig& oc, DType grad) {
    for (const Shape& s : shapes) {
      const std::string name = "p" + std::to_string(params.size());
      const ValueId p = g.param(name, s);
      Value gv;
      gv.name = name + ".grad";
      gv.shape = s;
      gv.dtype = grad;
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

void fill_bf16(Executor& ex, ValueId v, uint64_t seed, float scale) {
  const size_t n = static_cast<size_t>(numel(ex.graph().value(v).shape));
  for (size_t i = 0; i < n; ++i)
    ex.ptr<kernels::bf16_t>(v)[i] = kernels::f32_to_bf16(test_value(seed, static_cast<int64_t>(i), scale));
}

std::vector<float> read(Executor& ex, ValueId v) {
  std::vector<float> x(static_cast<size_t>(numel(ex.graph().value(v).shape)));
  ex.read_f32(v, x.data());
  return x;
}

}  // namespace

// SGD (momentum, Nesterov) and Adam/AdamW over bf16 gradients, f32 / bf16 /
// 8-bit state, with and without global-norm clipping, four steps: the fast
// kernels against the reference (the same widening, formulas and codec; what
// may differ is the compiler's contraction of a * b + c, which moves an
// 8-bit code by one step at most: test_optim_state's bounds). And the
// update equals the one over the f32 values of those bf16 gradients.
TEST(AccumulatedGrads, UpdatesReadBf16GradientsAsTheReference) {
  const std::vector<Shape> shapes = {{100003}, {17, 3}, {4096}, {5}};
  for (std::string kind : {"sgd", "adam", "adamw"})
    for (std::string state : {"fp32", "bf16", "8bit"})
      for (double clip : {0.0, 1.0}) {
        SCOPED_TRACE(kind + " " + state + " clip " + std::to_string(clip));
        OptimizerConfig oc;
        oc.kind = kind;
        oc.state = state;
        oc.momentum = 0.9;
        oc.weight_decay = kind == "adamw" ? 0.1 : 1e-3;
        oc.clip_grad_norm = clip;
        oc.nesterov = clip > 0;
        UpdateGraph u(shapes, oc, DType::bf16);
        // The same update over f32 gradients holding the same values.
        UpdateGraph u32(shapes, oc, DType::f32);
        const Graph& g32 = u32.g;
        const std::vector<ValueId>&p32 = u32.params, &g32s = u32.grads;
        Executor cpu(u.g, config(Backend::Cpu)), ref(u.g, config(Backend::Reference)), wide(g32, config(Backend::Cpu));
        const size_t node = u.g.num_nodes() - 1;
        const std::string op = kind == "sgd" ? "sgd_update" : "adam_update";
        EXPECT_EQ(std::string(cpu.kernel_name(node)), "cpu." + op);
        EXPECT_EQ(std::string(ref.kernel_name(node)), "ref." + op);
        for (Executor* e : {&cpu, &ref, &wide}) e->init_params(1);
        kernels::StepContext ctx;
        ctx.lr = 1e-2;
        ctx.grad_scale = 0.25;
        ctx.seed = 9;
        for (int step = 0; step < 4; ++step) {
          ctx.step = step;
          for (size_t t = 0; t < shapes.size(); ++t) {
            fill_bf16(cpu, u.grads[t], 100 * step + t, 0.2f);
            fill_bf16(ref, u.grads[t], 100 * step + t, 0.2f);
            std::vector<float> x(static_cast<size_t>(numel(shapes[t])));
            for (size_t i = 0; i < x.size(); ++i) x[i] = kernels::bf16_to_f32(cpu.ptr<kernels::bf16_t>(u.grads[t])[i]);
            wide.write_f32(g32s[t], x.data());
          }
          for (Executor* e : {&cpu, &ref, &wide}) e->run(ctx);
        }
        for (size_t t = 0; t < shapes.size(); ++t) {
          const std::vector<float> wc = read(cpu, u.params[t]), wr = read(ref, u.params[t]), ww = read(wide, p32[t]);
          size_t moved = 0;
          for (size_t i = 0; i < wc.size(); ++i) {
            const double d = std::abs(double(wc[i]) - double(wr[i]));
            if (d > 1e-6 * (std::abs(wr[i]) + 1)) ++moved;
            ASSERT_LE(d, 4 * 0.125 * ctx.lr + 1e-6) << "p" << t << "[" << i << "]";
          }
          EXPECT_LE(moved, wc.size() / 100 + 1) << "p" << t << ": off the reference by more than f32 roundings";
          // bf16 gradients read as their f32 values: the f32-gradient
          // update stores the same parameters (same kernels where the
          // state is compact; the plain f32 kernels otherwise, contraction
          // apart).
          size_t off = 0;
          for (size_t i = 0; i < wc.size(); ++i) off += std::abs(double(wc[i]) - double(ww[i])) > 1e-6 * (std::abs(ww[i]) + 1);
          EXPECT_LE(off, wc.size() / 100 + 1) << "p" << t << ": bf16 gradients not read as their values";
        }
      }
}

// ---------------------------------------------------------------- gpt-tiny

namespace {

using memfit::testing::feed_markov;
using memfit::testing::gpt_tiny;

// Mean loss of the last 20 of `steps` steps of 4 micro-batches each (the
// trainer's schedule: the step graph up to the update per micro-batch, the
// update with grad_scale 1/4).
double accumulated_loss(DType grads, int steps, double lr, double* first, size_t* grad_bytes = nullptr) {
  OptimizerConfig oc;
  oc.kind = "adamw";
  oc.weight_decay = 1e-2;
  train::StepSpec spec = gpt_tiny(oc);
  spec.accumulation = 4;
  spec.accumulated_grads = grads;
  const auto sg = train::build_step_graph(spec);
  Executor ex(sg->g, ExecConfig{});
  if (grad_bytes) *grad_bytes = ex.plan().arena_bytes[static_cast<size_t>(Arena::Grads)];
  ex.init_params(1);
  const size_t upd = train::update_begin(sg->g);
  kernels::StepContext ctx;
  ctx.lr = lr;
  ctx.seed = 1;
  double tail = 0;
  for (int step = 0; step < steps; ++step) {
    ctx.step = step;
    ctx.grad_scale = 1.0;
    double loss = 0;
    for (int m = 0; m < 4; ++m) {
      feed_markov(ex, *sg, 4 * step + m);
      ctx.micro = m;
      ex.run_nodes(0, upd, ctx);
      loss += ex.fetch_scalar(sg->loss) / 4;
    }
    ctx.grad_scale = 0.25;
    ex.run_nodes(upd, sg->g.num_nodes(), ctx);
    if (step == 0) *first = loss;
    if (step >= steps - 20) tail += loss;
  }
  return tail / 20;
}

}  // namespace

// 150 steps of AdamW (lr 3e-3), 4 micro-batches each: bf16 accumulated
// gradients learn as f32 ones do, within the 1% that compact optimizer
// state and bf16 master weights meet (test_optim_state, test_master_weights):
// the sum's rounding is unbiased noise of at most 2^-7 of it per
// micro-batch, far below the minibatch noise of the gradient itself. The
// gradient arena holds 2 bytes per parameter instead of 4.
TEST(AccumulatedGrads, GptTinyLearnsAsWithF32Accumulation) {
  const double lr = 3e-3;
  double first32 = 0, first16 = 0;
  size_t bytes32 = 0, bytes16 = 0;
  const double ref = accumulated_loss(DType::f32, 150, lr, &first32, &bytes32);
  const double l = accumulated_loss(DType::bf16, 150, lr, &first16, &bytes16);
  const double rel = (l - ref) / ref;
  std::printf("4 micro-batches: f32 accumulation %.4f -> %.6f, bf16 %.4f -> %.6f (%+.3f%%); gradients %zu -> %zu B\n",
              first32, ref, first16, l, 100 * rel, bytes32, bytes16);
  EXPECT_EQ(first16, first32) << "the first step's forward passes precede any rounding";
  EXPECT_LT(ref, 0.75 * first32);
  EXPECT_LT(std::abs(rel), 0.01) << "bf16 accumulation " << l << " vs f32 " << ref;
  EXPECT_LE(bytes16, bytes32 / 2 + 64 * 64);
  EXPECT_GE(bytes16, bytes32 / 2 - 64 * 64);
}

// ---------------------------------------------------------------- the binary

namespace {

using memfit::testing::write_fox_corpus;

std::string lm_args(const std::string& corpus, int steps) {
  return " --model gpt-tiny --data " + corpus + " --block-size 32 --batch 8 --accumulate 4 --steps " +
         std::to_string(steps) + " --checkpoint-every 20 --eval-every 0 --threads 1 --seed 3 --progress lines"
         " --optimizer adamw --schedule constant --accumulated-grads bf16";
}

}  // namespace

// 40 steps in one run, and 20 + --resume to 40 in another, end
// bit-identical (the rounding bits are a function of seed, step, micro-batch
// and parameter); the plan names the storage; what cannot take bf16
// gradients is refused naming the flag.
TEST(AccumulatedGrads, RunResumesBitIdenticalAndRefusals) {
  using memfit::testing::run_memfit;
  using memfit::testing::temp_dir;
  const std::string corpus = write_fox_corpus(temp_dir("ag-data"));
  const std::string a = temp_dir("ag-a"), b = temp_dir("ag-b");
  auto full = run_memfit("train" + lm_args(corpus, 40) + " --out " + a);
  ASSERT_EQ(full.code, 0) << full.out;
  EXPECT_NE(full.out.find("accumulated in bf16, rounded stochastically"), std::string::npos) << full.out;
  auto half = run_memfit("train" + lm_args(corpus, 20) + " --out " + b);
  ASSERT_EQ(half.code, 0) << half.out;
  auto rest = run_memfit("train" + lm_args(corpus, 40) + " --out " + b + " --resume " + b);
  ASSERT_EQ(rest.code, 0) << rest.out;
  EXPECT_NE(rest.out.find("resumed from"), std::string::npos) << rest.out;
  memfit::testing::expect_same_tensors(a + "/model.safetensors", b + "/model.safetensors");
  memfit::testing::expect_same_tensors(a + "/checkpoint.safetensors", b + "/checkpoint.safetensors");

  auto plan = run_memfit("plan --model gpt-tiny --data " + corpus +
                         " --block-size 32 --batch 8 --accumulate 4 --threads 1 --optimizer adamw"
                         " --accumulated-grads bf16 --json");
  ASSERT_EQ(plan.code, 0) << plan.out;
  EXPECT_NE(plan.out.find("\"accumulated_grads\":\"bf16\""), std::string::npos) << plan.out;

  for (const auto& [extra, says] : std::vector<std::pair<std::string, std::string>>{
           {" --optimizer adafactor", "--accumulated-grads bf16 takes sgd, adam or adamw"},
           {" --precision fp16", "--accumulated-grads bf16 cannot be checked for fp16's overflow"},
           {" --accumulated-grads fp64", "--accumulated-grads expects fp32 or bf16, got 'fp64'"}}) {
    auto r = run_memfit("train" + lm_args(corpus, 2) + extra + " --out " + temp_dir("ag-bad"));
    EXPECT_NE(r.code, 0) << extra;
    EXPECT_NE(r.out.find(says), std::string::npos) << extra << ": " << r.out;
  }
}

// Under a budget that only bf16 accumulated gradients meet, the fit chooses
// them with --allow-approx (and says so), and without it the refusal names
// the flag; given as fp32, the fit keeps fp32.
TEST(AccumulatedGrads, FitChoosesThemOnlyWithAllowApprox) {
  using memfit::testing::run_memfit;
  using memfit::testing::temp_dir;
  const std::string corpus = write_fox_corpus(temp_dir("ag-fit"));
  // State and weights fixed: what is left to choose beside the micro-batch,
  // precision and recomputation is the gradients' storage.
  const std::string run = "plan --model gpt-char --data " + corpus +
                          " --block-size 128 --batch 16 --threads 2 --optimizer adamw --precision fp32"
                          " --optimizer-state 8bit --master-weights bf16 --offload none";  // in memory
  auto smallest = [&](const std::string& extra) {
    auto r = run_memfit(run + " --memory 1MiB" + extra);
    EXPECT_EQ(r.code, 3) << r.out;
    const size_t at = r.out.find("(--memory ");
    EXPECT_NE(at, std::string::npos) << r.out;
    return std::stod(r.out.substr(at + 10));
  };
  const double exact = smallest(""), approx = smallest(" --allow-approx");
  ASSERT_LT(approx, exact) << "bf16 gradients save nothing here";
  const std::string budget = " --memory " + std::to_string((exact + approx) / 2) + "MiB";
  auto no = run_memfit(run + budget);
  EXPECT_EQ(no.code, 3) << no.out;
  EXPECT_NE(no.out.find("--accumulated-grads bf16"), std::string::npos) << no.out;
  auto yes = run_memfit(run + budget + " --allow-approx");
  ASSERT_EQ(yes.code, 0) << yes.out;
  EXPECT_NE(yes.out.find("chosen:"), std::string::npos) << yes.out;
  EXPECT_NE(yes.out.find(", bf16 accumulated gradients"), std::string::npos) << yes.out;
  EXPECT_NE(yes.out.find("accumulated in bf16, rounded stochastically"), std::string::npos) << yes.out;
  auto kept = run_memfit(run + budget + " --allow-approx --accumulated-grads fp32");
  EXPECT_EQ(kept.code, 3) << kept.out;
}
