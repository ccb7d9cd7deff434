// Times whole training steps (forward, loss, backward, optimizer update) of a
// zoo model on random data, as bench/run.py compares them with PyTorch.
//
//   step_bench [--model convnet|resnet18|gpt-char|lstm-classifier|...] [--batch 64]
//              [--steps 10] [--warmup 2] [--threads 2] [--precision fp32|bf16]
//              [--seq T] [--vocab V] [--classes C] [--profile] [--plain] [--serve]
//              [--recompute none|cheap|segments] [--update-in-backward] [--device cpu|cuda]
//   step_bench --peak [--threads 2]
//
// The model's signature (models/model.hpp) decides its data and optimizer,
// the same as bench/torch_step.py's:
//  - image classifiers: input 1x28x28 (the models of
//    tests/golden/make_golden.py), 10 classes, SGD lr 0.01 momentum 0.9
//    weight decay 5e-4;
//  - language models (gpt-char, gpt2, ...): tokens and targets i32 [T]
//    (--seq, default the model's block size) of --vocab values (default 65,
//    a character vocabulary), AdamW lr 1e-3, betas 0.9/0.999, weight decay
//    0.1 on 2-d weights only (none on biases and layer norms);
//  - other token models (lstm-classifier): tokens i32 [T] (--seq, default
//    128) of --vocab values (default 5000), --classes labels (default 4), Adam
//    lr 1e-3 without weight decay.
// Every input is uniform random (fixed seed): floats in [0, 1), integers in
// their range. Prints one JSON line: the step times, images_per_s (samples,
// i.e. sequences, per second at the median step; tokens_per_s as well for a
// token model), the training FLOPs of one step (the products: convolution,
// linear, matmul, attention and LSTM nodes, forward and backward, as
// executed; flops_uncounted names any product op kind without a FLOP count),
// and the process's peak RSS (VmHWM). With --profile it also prints (to
// stderr) the per-op and per-layer tables of the timed steps: their totals,
// and each node's fastest; and each product op's (each convolution
// direction's) GFLOP/s against the fp32 peak measured after the steps.
// --device cuda runs the step on the GPU (each timed step ends when the GPU
// has finished it: the loss is read back); the JSON adds the GPU's name.
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
#include <memory>
#include <random>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "kernels/cpu/engine.hpp"
#include "kernels/kernel.hpp"
#include "memfit/op_registry.hpp"
#include "memfit/runtime.hpp"
#include "models/model.hpp"
#include "ops/conv/cpu.hpp"
#include "runtime/device.hpp"
#include "base/json.hpp"
#include "base/process.hpp"
#include "compile/step_graph.hpp"
#include "compile/resolve.hpp"

using namespace memfit;
using Clock = std::chrono::steady_clock;

namespace {

// Multiply-add FLOPs x2 of the products one step runs: every node of a
// product op (heavy: conv2d, linear, matmul, attention, lstm) and every
// backward node of one ("conv2d_bwd_data", "attention_bwd", "lstm_bwd", ...;
// a matmul's backward is matmul nodes), each at its own op's count. The
// reshapes and permutes a backward emits are not products. A product op
// without a FLOP count is named in `uncounted`, and its nodes add nothing.
struct StepFlops {
  double products = 0;
  std::set<std::string> uncounted;
};

// A node's product FLOPs as step_flops counts them; -1 where it is no
// product, 0 for a product op without a count.
double node_product_flops(const Graph& g, const Node& n) {
  const OpDef& d = op_def(n.op);
  bool product = d.traits.heavy;
  if (!product && n.fwd >= 0) {
    const std::string& fop = g.node(n.fwd).op;
    product = op_def(fop).traits.heavy && n.op.rfind(fop + "_bwd", 0) == 0;
  }
  if (!product) return -1;
  return d.flops ? d.flops(g, n) : 0;
}

StepFlops step_flops(const Graph& g) {
  StepFlops f;
  for (const Node& n : g.nodes()) {
    const double fl = node_product_flops(g, n);
    if (fl < 0) continue;
    if (op_def(n.op).flops) f.products += fl;
    else f.uncounted.insert(n.op);
  }
  return f;
}

// The products' rate per op (each direction of a convolution its own op:
// conv2d, conv2d_bwd_data, conv2d_bwd_weight), from each node's fastest
// timed step, against the machine's fp32 peak where it was given.
std::string product_rates(const Graph& g, const std::vector<double>& t, double peak) {
  std::map<std::string, std::pair<double, double>> by_op;  // op -> (FLOPs, seconds)
  for (size_t k = 0; k < t.size(); ++k) {
    const Node& n = g.node(static_cast<NodeId>(k));
    const double fl = node_product_flops(g, n);
    if (fl <= 0) continue;
    by_op[n.op].first += fl;
    by_op[n.op].second += t[k];
  }
  std::string r = "products per op (each node's fastest step):\n";
  char buf[256];
  std::snprintf(buf, sizeof buf, "  %-24s %10s %10s %10s %8s\n", "op", "ms/step", "GFLOP", "GFLOP/s", "of peak");
  r += buf;
  for (auto& [op, ft] : by_op) {
    const double rate = ft.second > 0 ? ft.first / ft.second : 0;
    std::snprintf(buf, sizeof buf, "  %-24s %10.2f %10.2f %10.1f %7.0f%%\n", op.c_str(), 1e3 * ft.second,
                  ft.first / 1e9, rate / 1e9, peak > 0 ? 100.0 * rate / peak : 0.0);
    r += buf;
  }
  return r;
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
  std::fprintf(stderr, "step_bench: %s\nusage: step_bench [--model convnet|resnet18|gpt-char|lstm-classifier|...] "
               "[--batch N] [--steps N] [--warmup N] [--threads N] [--precision fp32|bf16] [--seq T] [--vocab V] "
               "[--classes C] [--profile] [--plain] [--serve] [--recompute none|cheap|segments] "
               "[--update-in-backward] [--bf16-convs auto|native|f32] [--winograd auto|off|2|4] [--dropout P (a zoo GPT's)]\n", msg);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  train::StepSpec spec;
  int steps = 10, warmup = 2, threads = 0;
  int64_t seq = 0, vocab = 0, classes = 0;  // 0: the model kind's default
  bool profile = false, do_peak = false, serve = false, plain = false;
  std::string precision = "fp32";
  Backend backend = Backend::Cpu;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--profile") profile = true;
    else if (a == "--peak") do_peak = true;
    else if (a == "--plain") plain = true;
    else if (a == "--serve") serve = true;
    else if (a == "--update-in-backward") spec.update_in_backward = true;
    else if (!(v = next())) return usage(("missing value after " + a).c_str());
    else if (a == "--model") spec.model = v;
    else if (a == "--recompute") spec.recompute = v;
    else if (a == "--batch") spec.batch = std::atoll(v);
    else if (a == "--steps") steps = std::atoi(v);
    else if (a == "--warmup") warmup = std::atoi(v);
    else if (a == "--threads") threads = std::atoi(v);
    else if (a == "--precision") precision = v;
    else if (a == "--winograd") {
      if (!kernels::cpu::choose_winograd(v)) return usage("--winograd takes auto, off, 2 or 4");
    } else if (a == "--bf16-convs") {
      if (!kernels::cpu::choose_bf16_convs(v)) return usage("--bf16-convs takes auto, native or f32");
    }
    else if (a == "--device") {
      if (std::string(v) != "cpu" && std::string(v) != "cuda") {
        std::fprintf(stderr, "step_bench: --device takes cpu or cuda\n");
        return 2;
      }
      backend = std::string(v) == "cuda" ? Backend::Cuda : Backend::Cpu;
    }
    else if (a == "--dropout") spec.model_options.dropout = {v};
    else if (a == "--seq") seq = std::atoll(v);
    else if (a == "--vocab") vocab = std::atoll(v);
    else if (a == "--classes") classes = std::atoll(v);
    else return usage(("unknown option " + a).c_str());
  }
  if (do_peak) return peak(threads);
  if (spec.batch <= 0 || steps <= 0 || warmup < 0) return usage("--batch and --steps must be positive");
  if (seq < 0 || vocab < 0 || classes < 0) return usage("--seq, --vocab and --classes must be positive");
  if (precision == "bf16") spec.precision = DType::bf16;
  else if (precision != "fp32") return usage("--precision expects fp32 or bf16");
  if (threads > 0) omp_set_num_threads(threads);

  models::Model model;
  try {
    model = models::resolve(spec.model, spec.model_options);
  } catch (const GraphError& e) {
    return usage(e.what());
  }
  const bool lm = model.task == models::Task::LanguageModel;
  const bool tokens = !lm && !model.inputs.empty() && model.inputs[0].name == "tokens";
  double lr = 0.01;
  if (lm) {
    // As nanoGPT's char-level run and tests/test_gpt_golden.cpp: decay on
    // the 2-d weights only, the groups torch_gpt.py makes.
    seq = seq ? seq : model.max_sequence;
    vocab = vocab ? vocab : 65;
    spec.data = {{"tokens", DType::i32, {seq}, 0.0, vocab}, {"targets", DType::i32, {seq}, -1.0, vocab}};
    spec.classes = vocab;
    spec.optimizer.kind = "adamw";
    spec.optimizer.weight_decay = 0.1;
    spec.optimizer.decay_bias_and_norm = false;
    lr = 1e-3;
  } else if (tokens) {
    // Full-length sequences (no lengths input): PyTorch's nn.LSTM then
    // needs no packing either.
    seq = seq ? seq : 128;
    vocab = vocab ? vocab : 5000;
    spec.classes = classes ? classes : 4;
    spec.data = {{"tokens", DType::i32, {seq}, 0.0, vocab}, {"labels", DType::i32, {}, -1.0, spec.classes}};
    spec.optimizer.kind = "adam";
    spec.optimizer.weight_decay = 0.0;
    lr = 1e-3;
  } else {
    spec.classes = classes ? classes : 10;
    spec.optimizer.kind = "sgd";
    spec.optimizer.momentum = 0.9;
    spec.optimizer.weight_decay = 5e-4;
  }

  std::unique_ptr<train::StepGraph> sg;
  try {
    sg = train::build_step_graph(spec);
  } catch (const GraphError& e) {
    // Data the model does not take (--seq over its block size, a vocabulary
    // over its own): a failure bench/run.py reports, not a row.
    std::fprintf(stderr, "step_bench: %s\n", e.what());
    return 1;
  }
  ExecConfig cfg;
  cfg.backend = backend;
  cfg.blocked_layouts = !plain;
  std::unique_ptr<Executor> exp;
  try {
    exp = std::make_unique<Executor>(sg->g, cfg);
  } catch (const std::exception& e) {  // no GPU, an op without a kernel there
    std::fprintf(stderr, "step_bench: %s\n", e.what());
    return 1;
  }
  Executor& ex = *exp;
  ex.init_params(1);
  {
    // Each input uniform random in its data's order: floats in [0, 1) (in
    // whatever type they are stored), integers in their range. For the
    // image models this is the stream the CNN rows have always used.
    std::mt19937 gen(1);
    std::uniform_real_distribution<float> U(0.0f, 1.0f);
    for (const train::StepInput& in : sg->inputs) {
      const size_t n = static_cast<size_t>(numel(sg->g.value(in.value).shape));
      if (in.spec.dtype == DType::i32) {
        const uint32_t range = static_cast<uint32_t>(in.spec.range > 0 ? in.spec.range : spec.classes);
        std::vector<int32_t> v(n);
        for (int32_t& e : v) e = static_cast<int32_t>(gen() % range);
        ex.feed(in.value, v.data(), n * sizeof(int32_t));
      } else {
        std::vector<float> v(n);
        for (float& e : v) e = U(gen);
        ex.write_f32(in.value, v.data());
      }
    }
  }
  kernels::StepContext ctx;
  ctx.lr = lr;
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
    if (backend == Backend::Cuda) (void)ex.fetch_scalar(sg->loss);  // waits for the GPU
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
    // The fp32 peak, measured as --peak does, with the step's threads.
    const double peak_flops = matmul_flops(dnnl::memory::data_type::f32, 3072, 4);
    std::fprintf(stderr, "fp32 peak (best 3072^3 oneDNN matmul): %.1f GFLOP/s\n", peak_flops / 1e9);
    std::fprintf(stderr, "%s", product_rates(sg->g, fastest, peak_flops).c_str());
  }
  const double loss = ex.fetch_scalar(sg->loss);
  std::vector<double> sorted = t;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  const StepFlops flops = step_flops(sg->g);
  train::Json uncounted = train::Json::array();
  for (const std::string& op : flops.uncounted) uncounted.push_back(op);
  train::Json j = {{"model", spec.model},
                   {"batch", spec.batch},
                   {"precision", precision},
                   {"supported", true},
                   {"threads", omp_get_max_threads()},
                   {"steps", steps},
                   {"median_step_s", median},
                   {"images_per_s", static_cast<double>(spec.batch) / median},
                   {"step_flops", flops.products},
                   {"flops_uncounted", uncounted},
                   {"peak_rss_bytes", train::peak_rss()},
                   {"arena_bytes", ex.arena_bytes()},
                   {"optimizer", spec.optimizer.kind},
                   {"loss", loss},
                   {"step_s", t}};
  if (backend != Backend::Cpu) {
    j["device"] = backend_name(backend);
    j["device_name"] = ex.device().info().model;
  }
  if (lm || tokens) {
    j["seq_len"] = seq;
    j["vocab"] = vocab;
    j["tokens_per_s"] = static_cast<double>(spec.batch * seq) / median;
  }
  std::printf("%s\n", train::json_line(j).c_str());
  return 0;
}
