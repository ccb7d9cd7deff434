// Times the optimizer update alone (the update node of a training step) for
// each optimizer-state policy, on a zoo model's trainable parameters.
//
//   optim_bench [--model gpt2] [--steps 5] [--threads 2] [--policies adamw:fp32,adamw:bf16,adamw:8bit,adafactor]
//
// The step graph is built for one sequence of 16 tokens (a GPT) or one
// 28x28 image (the image classifiers): only its update node runs, on
// gradients filled once with uniform values in [-1e-3, 1e-3). Prints one
// JSON line per policy: the median and the fastest update, and the plan's
// optimizer-state bytes and bytes per parameter.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/kernel.hpp"
#include "memfit/rng.hpp"
#include "memfit/runtime.hpp"
#include "compile/step_graph.hpp"

using namespace memfit;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> r;
  size_t b = 0;
  while (b <= s.size()) {
    const size_t e = std::min(s.find(',', b), s.size());
    r.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "gpt2", policies = "adamw:fp32,adamw:bf16,adamw:8bit,adafactor";
  int steps = 5, threads = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") model = v;
    else if (k == "--steps") steps = std::stoi(v);
    else if (k == "--threads") threads = std::stoi(v);
    else if (k == "--policies") policies = v;
    else {
      std::fprintf(stderr, "optim_bench: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  omp_set_num_threads(threads);
  for (const std::string& pol : split(policies)) {
    train::StepSpec s;
    s.model = model;
    s.batch = 1;
    if (model.rfind("gpt", 0) == 0) {
      s.data = {{"tokens", DType::i32, {16}, 0.0, 50257}, {"targets", DType::i32, {16}, -1.0, 50257}};
      s.classes = 50257;
    }
    const size_t colon = pol.find(':');
    s.optimizer.kind = pol.substr(0, colon);
    if (colon != std::string::npos) s.optimizer_state = pol.substr(colon + 1);
    s.optimizer.weight_decay = 0.1;
    const auto sg = train::build_step_graph(s);
    const Graph& g = sg->g;
    Executor ex(g, ExecConfig{});
    ex.init_params(1);
    const size_t ub = train::update_begin(g);
    int64_t params = 0;
    for (ValueId p : g.trainable_params()) {
      const Value& v = g.value(p);
      if (v.grad == kNone) continue;
      params += numel(v.shape);
      float* gr = ex.ptr<float>(v.grad);
      const uint64_t key = rng::stream_key(2, rng::name_hash(v.name), 0);
      for (int64_t i = 0; i < numel(v.shape); ++i) gr[i] = rng::uniform_sym(key, static_cast<uint64_t>(i), 1e-3f);
    }
    kernels::StepContext ctx;
    ctx.lr = 1e-4;
    std::vector<double> ms;
    for (int step = 0; step < steps + 1; ++step) {
      ctx.step = step;
      const auto t0 = Clock::now();
      ex.run_nodes(ub, g.num_nodes(), ctx);
      const double t = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (step > 0) ms.push_back(t);  // the first touches the state's pages
    }
    std::sort(ms.begin(), ms.end());
    const size_t state = ex.plan().arena_bytes[static_cast<size_t>(Arena::OptState)];
    std::printf("{\"model\": \"%s\", \"policy\": \"%s\", \"threads\": %d, \"params\": %lld, \"update_ms_median\": %.1f, "
                "\"update_ms_min\": %.1f, \"optstate_bytes\": %zu, \"bytes_per_param\": %.3f, \"kernel\": \"%s\"}\n",
                model.c_str(), pol.c_str(), threads, static_cast<long long>(params), ms[ms.size() / 2], ms.front(),
                state, static_cast<double>(state) / static_cast<double>(params), ex.kernel_name(ub));
    std::fflush(stdout);
  }
  return 0;
}
