// Times one full training step (forward, loss, backward, SGD update) of a zoo
// model on the fast CPU backend and on the f32 reference, with a per-op
// breakdown of the CPU step.
//
//   kernel_bench [model=convnet] [batch=64] [cpu_steps=20] [ref_steps=1]
//
// Inputs are random (images in [0, 1), labels in [0, 10)); timings are wall
// clock, after one warm-up step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernel.hpp"
#include "memfit/runtime.hpp"
#include "runtime/kernel_table.hpp"
#include "compile/step_graph.hpp"

using namespace memfit;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void feed(Executor& ex, const train::StepGraph& sg) {
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> U(0.0f, 1.0f);
  const Graph& g = sg.g;
  std::vector<float> x(static_cast<size_t>(numel(g.value(sg.x).shape)));
  for (float& v : x) v = U(gen);
  ex.write_f32(sg.x, x.data());
  auto* labels = ex.ptr<int32_t>(sg.labels);
  for (int64_t i = 0; i < numel(g.value(sg.labels).shape); ++i) labels[i] = static_cast<int32_t>(gen() % 10);
}

// Mean seconds per step over `steps` steps (after one warm-up step); with
// `per_op`, also the time per op kind.
double time_steps(const train::StepGraph& sg, Backend b, int steps, std::map<std::string, double>* per_op) {
  ExecConfig cfg;
  cfg.backend = b;
  Executor ex(sg.g, cfg);
  ex.init_params(1);
  feed(ex, sg);
  kernels::StepContext ctx;
  ctx.lr = 0.01;
  ctx.seed = 1;
  ex.run(ctx);
  ++ctx.step;
  const size_t nodes = sg.g.num_nodes();
  double total = 0;
  std::vector<double> each;
  for (int s = 0; s < steps; ++s, ++ctx.step) {
    if (!per_op) {
      auto t0 = Clock::now();
      ex.run(ctx);
      each.push_back(seconds_since(t0));
      total += each.back();
      continue;
    }
    for (size_t k = 0; k < nodes; ++k) {
      auto t0 = Clock::now();
      ex.run_nodes(k, k + 1, ctx);
      const double dt = seconds_since(t0);
      (*per_op)[sg.g.node(static_cast<NodeId>(k)).op] += dt / steps;
      total += dt;
    }
  }
  std::printf("  %-10s arena %.1f MiB, mean %.2f ms/step", backend_name(b),
              static_cast<double>(ex.arena_bytes()) / (1 << 20), 1e3 * total / steps);
  if (!each.empty()) {
    std::sort(each.begin(), each.end());
    std::printf(", median %.2f, min %.2f", 1e3 * each[each.size() / 2], 1e3 * each[0]);
  }
  std::printf("%s\n", per_op ? " (node by node)" : "");
  return total / steps;
}

}  // namespace

int main(int argc, char** argv) {
  train::StepSpec spec;
  spec.model = argc > 1 ? argv[1] : "convnet";
  spec.batch = argc > 2 ? std::atoll(argv[2]) : 64;
  const int cpu_steps = argc > 3 ? std::atoi(argv[3]) : 20;
  const int ref_steps = argc > 4 ? std::atoi(argv[4]) : 1;
  if (spec.model != "convnet") spec.channels = 3, spec.height = spec.width = 32;
  spec.optimizer.kind = "sgd";
  spec.optimizer.momentum = 0.9;
  auto sg = train::build_step_graph(spec);
  std::printf("%s, batch %lld, %zu nodes\n", spec.model.c_str(), static_cast<long long>(spec.batch), sg->g.num_nodes());

  std::map<std::string, std::string> kernel_of;
  for (const Node& n : sg->g.nodes()) {
    auto k = make_kernel(sg->g, n, Backend::Cpu);
    if (k) kernel_of[n.op] = k->name();
  }

  std::map<std::string, double> per_op;
  const double cpu = time_steps(*sg, Backend::Cpu, cpu_steps, &per_op);
  const double cpu_whole = time_steps(*sg, Backend::Cpu, cpu_steps, nullptr);
  (void)cpu_whole;
  double ref = 0;
  if (ref_steps > 0) ref = time_steps(*sg, Backend::Reference, ref_steps, nullptr);

  std::vector<std::pair<double, std::string>> ops;
  for (auto& [op, t] : per_op) ops.push_back({t, op});
  std::sort(ops.rbegin(), ops.rend());
  std::printf("  cpu step by op (node-by-node timing):\n");
  for (auto& [t, op] : ops)
    std::printf("    %-20s %-24s %8.3f ms  %5.1f%%\n", op.c_str(), kernel_of[op].c_str(), 1e3 * t, 100 * t / cpu);
  if (ref > 0) std::printf("  speed-up cpu vs reference: %.1fx\n", ref / cpu_whole);
  return 0;
}
