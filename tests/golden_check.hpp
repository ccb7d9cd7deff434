// The golden check against PyTorch (fixtures: tests/golden/make_golden.py),
// shared by test_golden (the zoo models) and test_onnx (the same models
// imported from ONNX files).
// The same model, initial weights, batch and dropout masks; memfit must
// reproduce the initial weights bitwise, the step-0 logits, loss and every
// parameter gradient, and the 20-step SGD loss trajectory.
//
// Tolerances (f32 on both sides, different summation orders):
//  - init: bitwise (same generator, same float operations).
//  - logits: |d| <= 1e-4 * max|logit|; loss: 1e-5 relative. One forward pass
//    of f32 accumulations over <= 4608 terms differs by ~1e-6 relative.
//  - gradients: ||g - g_ref|| <= 1e-3 ||g_ref|| per tensor (norm, sum and
//    samples for large tensors). Backward chains two or three reductions
//    over up to 50k terms; relative errors of 1e-5..1e-4 are expected, an
//    indexing or formula error is O(1).
//    ResNet-18 only: a ReLU unit whose pre-activation lies within fp32
//    rounding of zero may switch against float64 (one of 6.9M units on
//    AVX2, none on AVX-512 here); the test finds such units by running the
//    forward pass in float64 too, and holds the parameters before the last
//    switched unit (and the statistics after 20 steps) to twice the distance
//    PyTorch's own fp32 shows in the same case (kFlipSpread below).
//  - losses over 20 steps: ConvNet 1e-4 relative, ResNet-18 1e-3 relative.
//    Errors compound through 20 updates. ResNet-18's reference trajectory is
//    computed by PyTorch in float64 at lr 1e-4, where PyTorch's own fp32 runs
//    stay within 3e-4 of it (at lr 0.01 memorising one batch is chaotic: its
//    own 1- and 2-thread fp32 runs differ by 0.4% at step 3).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "kernel_cases.hpp"
#include "kernels/kernel.hpp"
#include "memfit/runtime.hpp"
#include "runtime/device.hpp"
#include "runtime/lower_cpu/layout.hpp"
#include "compile/step_graph.hpp"

namespace {

using namespace memfit;

// The fp32 spread where a ReLU unit switched: PyTorch 1.13's own fp32 step-0
// gradients on the ResNet-18 fixture are up to 5.07e-3 (relative L2) from
// float64 when oneDNN runs its AVX2 kernels (two switched units), against
// 3.5e-5 with AVX-512 (none): tests/golden/fp32_distance.py. memfit is held
// to twice PyTorch's distance, 1.0e-2: ten times the 1e-3 bounds.
constexpr double kFlipSpread = 10.0;

std::vector<float> f32(const io::SafetensorsFile& f, const std::string& name) {
  const io::TensorInfo& t = f.at(name);
  EXPECT_EQ(t.dtype, io::DType::F32) << name;
  std::vector<float> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), f.data(t), t.nbytes());
  return v;
}
double f64(const io::SafetensorsFile& f, const std::string& name) {
  const io::TensorInfo& t = f.at(name);
  double v;
  std::memcpy(&v, f.data(t), 8);
  return v;
}
std::vector<int64_t> i64(const io::SafetensorsFile& f, const std::string& name) {
  const io::TensorInfo& t = f.at(name);
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), f.data(t), t.nbytes());
  return v;
}
// A float value as f32 on the host, from any device (Executor::read_f32).
std::vector<float> host_f32(Executor& ex, ValueId v) {
  std::vector<float> r(static_cast<size_t>(numel(ex.graph().value(v).shape)));
  ex.read_f32(v, r.data());
  return r;
}
double norm(const float* p, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += static_cast<double>(p[i]) * p[i];
  return std::sqrt(s);
}

struct GoldenCase {
  // model: a zoo name or a model path (an .onnx file), as --model takes it.
  std::string model, file, last_fc;
  double loss_rtol, loss_atol;
  bool flip_check = false;  // look for ReLU units that switched against float64
};

// ReLU units whose input has another sign in memfit's fp32 forward pass (on
// the backend under test) than
// in the float64 forward pass of the same graph (Reference64, the double
// scalar kernels), for the step-0 batch. `last` is the forward position of
// the last ReLU with a switched unit: every parameter used before it sees a
// changed batch-norm backward.
struct Flips {
  int count = 0;
  size_t last = 0;
  std::string where;
};

Flips relu_flips(const Graph& g, const std::vector<float>& input, ValueId x, Backend backend, const Device* device) {
  size_t fwd_end = 0;
  while (fwd_end < g.num_nodes() && g.node(static_cast<NodeId>(fwd_end)).phase == Phase::Forward) ++fwd_end;
  ExecConfig c32, c64;
  c32.plan.no_plan = c64.plan.no_plan = true;  // every value kept
  c32.backend = backend;
  c32.device = device;
  c64.backend = Backend::Reference64;
  Executor e32(g, c32), e64(g, c64);
  e32.init_params(42);
  e64.init_params(42);
  e32.write_f32(x, input.data());
  e64.write_f32(x, input.data());
  kernels::StepContext ctx;
  ctx.seed = 42;
  e32.run_nodes(0, fwd_end, ctx);
  e64.run_nodes(0, fwd_end, ctx);
  const auto layouts = cpu_layouts(g);
  Flips f;
  for (size_t i = 0; i < fwd_end; ++i) {
    const Node& n = g.node(static_cast<NodeId>(i));
    if (n.op != "relu") continue;
    const ValueId v = n.inputs[0];
    const Shape& s = g.value(v).shape;
    const size_t count = static_cast<size_t>(numel(s));
    std::vector<float> a = host_f32(e32, v);
    if (backend == Backend::Cpu && layouts[static_cast<size_t>(v)] == kernels::cpu::Layout::Blocked16)
      a = memfit::testing::to_plain(a, s[0], s[1], s[2] * s[3]);
    const double* b = e64.ptr<double>(v);
    for (size_t k = 0; k < count; ++k)
      if ((a[k] > 0) != (b[k] > 0)) {
        ++f.count;
        f.last = i;
        f.where += " " + n.layer + "[" + std::to_string(k) + "] fp32 " + std::to_string(a[k]) + " float64 " +
                   std::to_string(b[k]) + ";";
      }
  }
  return f;
}

// device: a device by name (runtime/device.hpp) lowering as `backend` does;
// null: the backend's own.
void run_golden(const GoldenCase& c, Backend backend, const Device* device = nullptr) {
  io::SafetensorsFile f = io::SafetensorsFile::load(std::string(MEMFIT_TEST_DATA) + "/golden/" + c.file);
  train::StepSpec spec;
  spec.model = c.model;
  spec.batch = 16;
  spec.optimizer.kind = "sgd";
  spec.optimizer.momentum = 0.9;
  spec.optimizer.weight_decay = 5e-4;
  auto sg = train::build_step_graph(spec);
  const Graph& g = sg->g;
  ExecConfig cfg;
  cfg.backend = backend;
  cfg.device = device;
  Executor ex(g, cfg);
  ex.init_params(42);

  // Initial weights: bitwise.
  for (ValueId v : g.params()) {
    const Value& val = g.value(v);
    const std::vector<float> pv = host_f32(ex, v);
    const float* p = pv.data();
    const size_t n = static_cast<size_t>(numel(val.shape));
    EXPECT_NEAR(norm(p, n), f64(f, "init_norm." + val.name), 1e-9 * f64(f, "init_norm." + val.name) + 1e-12) << val.name;
    if (f.find("init." + val.name)) {
      auto ref = f32(f, "init." + val.name);
      ASSERT_EQ(ref.size(), n);
      EXPECT_EQ(std::memcmp(ref.data(), p, n * 4), 0) << val.name << " initial values differ";
    } else {
      auto idx = i64(f, "init_sample_idx." + val.name);
      auto ref = f32(f, "init_sample." + val.name);
      for (size_t k = 0; k < idx.size(); ++k) EXPECT_EQ(ref[k], p[idx[k]]) << val.name << "[" << idx[k] << "]";
    }
  }

  auto input = f32(f, "input");
  ex.write_f32(sg->x, input.data());
  // Where a ReLU unit switched against float64 (a pre-activation within fp32
  // rounding of zero, see the top), the gradients of the parameters before
  // it and what they drive carry the fp32 spread measured for PyTorch itself
  // (tests/golden/README.md); the others keep the tight bounds.
  Flips flips;
  if (c.flip_check) {
    flips = relu_flips(g, input, sg->x, backend, device);
    if (flips.count > 0)
      std::printf("golden: %d ReLU unit(s) switched against float64 (fp32 rounding):%s parameters used before "
                  "node %zu are held to the measured fp32 spread\n",
                  flips.count, flips.where.c_str(), flips.last);
  }
  std::vector<bool> upstream(g.num_values(), false);  // used by a forward node before the last flip
  for (size_t i = 0; flips.count > 0 && i < flips.last; ++i)
    for (ValueId in : g.node(static_cast<NodeId>(i)).inputs) upstream[static_cast<size_t>(in)] = true;
  auto widen = [&](ValueId v) { return upstream[static_cast<size_t>(v)] ? kFlipSpread : 1.0; };
  const io::TensorInfo& lt = f.at("labels");
  ex.feed(sg->labels, f.data(lt), lt.nbytes());

  // Step 0 without the update: logits, loss, gradients.
  kernels::StepContext ctx;
  ctx.seed = 42;
  ctx.lr = std::stod(f.metadata().at("lr"));  // 0.01 for the ConvNet, 1e-4 for ResNet-18
  ctx.step = 0;
  const size_t n_nodes = g.num_nodes();
  ASSERT_EQ(g.node(static_cast<NodeId>(n_nodes - 1)).phase, Phase::Update);
  ex.run_nodes(0, n_nodes - 1, ctx);
  {
    auto ref = f32(f, "logits");
    const std::vector<float> lv = host_f32(ex, sg->logits);
    const float* l = lv.data();
    double mx = 0;
    for (float r : ref) mx = std::max(mx, std::abs(static_cast<double>(r)));
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(l[i], ref[i], 1e-4 * mx) << "logit " << i;
    const double loss = ex.fetch_scalar(sg->loss), rl = f32(f, "loss")[0];
    EXPECT_NEAR(loss, rl, 1e-5 * rl) << "step-0 loss";
  }
  int checked = 0;
  for (ValueId v : g.trainable_params()) {
    const Value& val = g.value(v);
    ASSERT_NE(val.grad, kNone) << val.name;
    const std::vector<float> gv = host_f32(ex, val.grad);
    const float* gp = gv.data();
    const size_t n = static_cast<size_t>(numel(val.shape));
    if (f.find("grad." + val.name)) {
      auto ref = f32(f, "grad." + val.name);
      ASSERT_EQ(ref.size(), n);
      double d = 0, r = 0;
      for (size_t i = 0; i < n; ++i) {
        d += (static_cast<double>(gp[i]) - ref[i]) * (static_cast<double>(gp[i]) - ref[i]);
        r += static_cast<double>(ref[i]) * ref[i];
      }
      EXPECT_LE(std::sqrt(d), widen(v) * 1e-3 * std::sqrt(r) + 1e-12) << val.name << " gradient differs";
    } else {
      const double rn = f64(f, "grad_norm." + val.name), rs = f64(f, "grad_sum." + val.name);
      double s = 0;
      for (size_t i = 0; i < n; ++i) s += gp[i];
      const double w = widen(v);
      EXPECT_NEAR(norm(gp, n), rn, w * 1e-3 * rn) << val.name << " gradient norm";
      EXPECT_NEAR(s, rs, w * (1e-3 * rn * std::sqrt(static_cast<double>(n)) * 1e-2 + 1e-3 * std::abs(rs)))
          << val.name << " gradient sum";
      auto idx = i64(f, "grad_sample_idx." + val.name);
      auto ref = f32(f, "grad_sample." + val.name);
      const double rms = rn / std::sqrt(static_cast<double>(n));
      for (size_t k = 0; k < idx.size(); ++k)
        EXPECT_NEAR(gp[idx[k]], ref[k], w * (1e-3 * std::abs(ref[k]) + 1e-2 * rms)) << val.name << "[" << idx[k] << "]";
    }
    ++checked;
  }
  EXPECT_GT(checked, 0);
  ex.run_nodes(n_nodes - 1, n_nodes, ctx);  // the step-0 update

  // The 20-step trajectory.
  auto losses = f32(f, "losses");
  ASSERT_EQ(losses.size(), 20u);
  EXPECT_NEAR(ex.fetch_scalar(sg->loss), losses[0], 1e-5 * losses[0]);
  for (int t = 1; t < 20; ++t) {
    ctx.step = t;
    ex.run(ctx);
    const double l = ex.fetch_scalar(sg->loss);
    EXPECT_NEAR(l, losses[static_cast<size_t>(t)], c.loss_rtol * losses[static_cast<size_t>(t)] + c.loss_atol)
        << c.model << " loss at step " << t;
  }
  // After the 20th update: final weights and batch-norm statistics.
  {
    ValueId fc = g.find(c.last_fc);
    const size_t n = static_cast<size_t>(numel(g.value(fc).shape));
    const double rn = f64(f, "final_norm." + c.last_fc);
    EXPECT_NEAR(norm(host_f32(ex, fc).data(), n), rn, (flips.count > 0 ? kFlipSpread : 1.0) * 1e-3 * rn) << "final " << c.last_fc;
  }
  for (const char* bn : {"bn1", "layer4.1.bn2"}) {
    for (const char* stat : {"running_mean", "running_var"}) {
      std::string name = std::string(bn) + "." + stat;
      if (!f.find("final." + name)) continue;
      auto ref = f32(f, "final." + name);
      const ValueId sv = g.find(name);
      const std::vector<float> sv_host = host_f32(ex, sv);
      const float* p = sv_host.data();
      double mx = 0;
      for (float r : ref) mx = std::max(mx, std::abs(static_cast<double>(r)));
      // After the first update every forward value depends on the weights
      // upstream of a switch: the statistics carry the spread wherever they are.
      const double w = flips.count > 0 ? kFlipSpread : 1.0;
      for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(p[i], ref[i], w * 1e-3 * mx) << name << "[" << i << "]";
    }
  }
}

}  // namespace

