// Times whole training steps (forward, loss, backward, SGD update) of a zoo
// model on random data, as bench/run.py compares them with PyTorch.
//
//   step_bench [--model convnet|resnet18] [--batch 64] [--steps 10] [--warmup 2]
//              [--threads 2] [--precision fp32|bf16] [--profile] [--plain] [--serve]
//   step_bench --peak [--threads 2]
//
// Input 1x28x28 (the models of tests/golden/make_golden.py), 10 classes, SGD
// lr 0.01 momentum 0.9 weight decay 5e-4. Prints one JSON line: the step
// times, images/s (median step), the training FLOPs of one step (convolution
// and linear products, forward and backward, as executed), and the process's
// peak RSS (VmHWM). With --profile it also prints (to stderr) the per-op and
// per-layer tables of the timed steps: their totals, and each node's fastest.
// --plain keeps every activation in plain NCHW (no channel-blocked layouts).
// --serve (used by bench/run.py to interleave memfit's and PyTorch's steps):
// after the warm-up prints "ready", then runs one step per "step" line read
// from stdin and prints its seconds; any other line or end of input ends the
// run with the JSON line as usual.
//
// --peak measures what the machine's cores can do: the best of several large
// square products (oneDNN matmul, f32 and bf16 inputs with f32 output), in
// FLOP/s, with the oneDNN version and the instruction set it uses.
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/conv.hpp"
#include "kernels/cpu/engine.hpp"
#include "kernels/kernel.hpp"
#include "memfit/op_registry.hpp"
#include "memfit/runtime.hpp"
#include "train/json.hpp"
#include "train/memory.hpp"
#include "train/step_graph.hpp"

using namespace memfit;
using Clock = std::chrono::steady_clock;

namespace {

// Multiply-add FLOPs of the products one step runs: every conv/linear node,
// and every backward node of one at its forward node's count.
double step_flops(const Graph& g) {
  double f = 0;
  for (const Node& n : g.nodes()) {
    const Node* fwd = nullptr;
    if (n.op == "conv2d" || n.op == "linear") fwd = &n;
    else if ((n.op.rfind("conv2d_bwd", 0) == 0 || n.op.rfind("linear_bwd", 0) == 0) && n.fwd >= 0) fwd = &g.node(n.fwd);
    if (fwd && op_def(fwd->op).flops) f += op_def(fwd->op).flops(g, *fwd);
  }
  return f;
}

// Best FLOP/s of an n x n x n product with inputs of type dt.
double matmul_flops(dnnl::memory::data_type dt, int64_t n, int reps) {
  using dnnl::memory;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream st(eng);
  // Weights in the layout oneDNN prefers (packed once, as a trained layer's
  // would be), so the figure is the multiply's, not a per-call repacking's.
  memory::desc a({n, n}, dt, memory::format_tag::ab), c({n, n}, memory::data_type::f32, memory::format_tag::ab);
  memory::desc b({n, n}, dt, memory::format_tag::any);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), eng);
  memory A(a, eng), B(pd.weights_desc(), eng), C(c, eng);
  std::memset(A.get_data_handle(), 0, a.get_size());
  std::memset(B.get_data_handle(), 0, pd.weights_desc().get_size());
  dnnl::matmul mm(pd);
  double best = 1e30;
  for (int r = 0; r < reps + 1; ++r) {
    const auto t0 = Clock::now();
    mm.execute(st, {{DNNL_ARG_SRC, A}, {DNNL_ARG_WEIGHTS, B}, {DNNL_ARG_DST, C}});
    st.wait();
    if (r > 0) best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / best;
}

// bf16 products exist only where oneDNN has bf16 compute (AVX-512): on an
// AVX2-only CPU the figure is reported as not supported, not measured.
int peak(int threads) {
  if (threads > 0) omp_set_num_threads(threads);
  const auto& m = kernels::cpu::machine_info();
  const double f32 = matmul_flops(dnnl::memory::data_type::f32, 3072, 4);
  train::Json bf16 = "not supported on this CPU";
  if (m.onednn_bf16) {
    try {
      bf16 = matmul_flops(dnnl::memory::data_type::bf16, 3072, 4);
    } catch (const dnnl::error&) {
      // no bf16 matmul on this oneDNN after all: the figure stays "not supported"
    }
  }
  const train::Json j = {{"threads", omp_get_max_threads()},
                         {"peak_fp32_flops", f32},
                         {"peak_bf16_flops", bf16},
                         {"onednn", m.onednn_version},
                         {"isa", m.onednn_isa},
                         {"bf16_compute", m.onednn_bf16},
                         {"vector_isa", m.vector_isa},
                         {"cpu", m.cpu_model},
                         {"bf16_convs", kernels::cpu::bf16_product_path()}};
  std::printf("%s\n", train::json_line(j).c_str());
  return 0;
}

int usage(const char* msg) {
  std::fprintf(stderr, "step_bench: %s\nusage: step_bench [--model convnet|resnet18] [--batch N] [--steps N] "
               "[--warmup N] [--threads N] [--precision fp32|bf16] [--profile] [--plain] [--serve]\n", msg);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  train::StepSpec spec;
  int steps = 10, warmup = 2, threads = 0;
  bool profile = false, do_peak = false, serve = false, plain = false;
  std::string precision = "fp32";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--profile") profile = true;
    else if (a == "--peak") do_peak = true;
    else if (a == "--plain") plain = true;
    else if (a == "--serve") serve = true;
    else if (!(v = next())) return usage(("missing value after " + a).c_str());
    else if (a == "--model") spec.model = v;
    else if (a == "--batch") spec.batch = std::atoll(v);
    else if (a == "--steps") steps = std::atoi(v);
    else if (a == "--warmup") warmup = std::atoi(v);
    else if (a == "--threads") threads = std::atoi(v);
    else if (a == "--precision") precision = v;
    else return usage(("unknown option " + a).c_str());
  }
  if (do_peak) return peak(threads);
  if (spec.batch <= 0 || steps <= 0 || warmup < 0) return usage("--batch and --steps must be positive");
  if (precision == "bf16") spec.precision = DType::bf16;
  else if (precision != "fp32") return usage("--precision expects fp32 or bf16");
  if (threads > 0) omp_set_num_threads(threads);
  spec.optimizer.kind = "sgd";
  spec.optimizer.momentum = 0.9;
  spec.optimizer.weight_decay = 5e-4;

  auto sg = train::build_step_graph(spec);
  ExecConfig cfg;
  cfg.backend = Backend::Cpu;
  cfg.blocked_layouts = !plain;
  Executor ex(sg->g, cfg);
  ex.init_params(1);
  {
    std::mt19937 gen(1);
    std::uniform_real_distribution<float> U(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(numel(sg->g.value(sg->x).shape)));
    for (float& e : x) e = U(gen);
    ex.write_f32(sg->x, x.data());
    auto* labels = ex.ptr<int32_t>(sg->labels);
    for (int64_t i = 0; i < numel(sg->g.value(sg->labels).shape); ++i) labels[i] = static_cast<int32_t>(gen() % 10);
  }
  kernels::StepContext ctx;
  ctx.lr = 0.01;
  ctx.seed = 1;
  for (int s = 0; s < warmup; ++s, ++ctx.step) ex.run(ctx);
  if (profile) ex.set_profiling(true);
  std::vector<double> t;
  // Per node: the fastest of the timed steps (on a busy machine the sum
  // mostly measures other processes' time slices).
  std::vector<double> fastest(sg->g.num_nodes(), 1e30), before(sg->g.num_nodes(), 0.0);
  auto want_step = [&]() {
    if (!serve) return static_cast<int>(t.size()) < steps;
    // Served: one step per "step" line on stdin, its time back on stdout.
    char line[64];
    return std::fgets(line, sizeof line, stdin) && std::strncmp(line, "step", 4) == 0;
  };
  if (serve) {
    std::printf("ready\n");
    std::fflush(stdout);
  }
  for (; want_step(); ++ctx.step) {
    const auto t0 = Clock::now();
    ex.run(ctx);
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    if (serve) {
      std::printf("%.6f\n", t.back());
      std::fflush(stdout);
    }
    if (!profile) continue;
    for (size_t k = 0; k < fastest.size(); ++k) {
      fastest[k] = std::min(fastest[k], ex.node_seconds()[k] - before[k]);
      before[k] = ex.node_seconds()[k];
    }
  }
  steps = static_cast<int>(t.size());
  if (steps == 0) return 0;
  if (profile) {
    std::fprintf(stderr, "all timed steps:\n%s", profile_report(ex, ex.node_seconds(), steps).c_str());
    std::fprintf(stderr, "each node's fastest step:\n%s", profile_report(ex, fastest, 1).c_str());
  }
  const float loss = *ex.ptr<float>(sg->loss);
  std::vector<double> sorted = t;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  const train::Json j = {{"model", spec.model},
                         {"batch", spec.batch},
                         {"precision", precision},
                         {"supported", true},
                         {"threads", omp_get_max_threads()},
                         {"steps", steps},
                         {"median_step_s", median},
                         {"images_per_s", static_cast<double>(spec.batch) / median},
                         {"step_flops", step_flops(sg->g)},
                         {"peak_rss_bytes", train::peak_rss()},
                         {"arena_bytes", ex.arena_bytes()},
                         {"loss", loss},
                         {"step_s", t}};
  std::printf("%s\n", train::json_line(j).c_str());
  return 0;
}
