#include "fit/fit.hpp"

#include <algorithm>
#include <cstdio>
#include <set>
#include <utility>

#include "runtime/device.hpp"
#include "memfit/op_registry.hpp"

namespace memfit::train {

std::string FitCandidate::describe() const {
  char buf[120];
  std::snprintf(buf, sizeof buf, ": %.1f MiB, ~%.2f s/step", static_cast<double>(total_bytes) / (1 << 20),
                predicted_seconds);
  std::string s = policy.describe() + buf;
  if (io_seconds > 0) {
    std::snprintf(buf, sizeof buf, " (%.2f s of it offload I/O not overlapped)", io_seconds);
    s += buf;
  }
  return s;
}

double predict_step_seconds(const StepCosts& c, double flops_per_second, double flops_per_micro, int64_t rows,
                            int64_t accumulate, size_t nodes) {
  const double sustained = flops_per_second > 0 ? flops_per_second : c.fallback_flops_per_second;
  const double m = static_cast<double>(rows);
  const double rate = sustained * m / (m + c.half_rate_rows);
  return static_cast<double>(accumulate) * (flops_per_micro / rate + static_cast<double>(nodes) * c.seconds_per_node);
}

double graph_flops(const Graph& g) {
  double flops = 0;
  for (const Node& n : g.nodes())
    if (const auto& f = op_def(n.op).flops) flops += f(g, n);
  return flops;
}

double storage_time_factor(const Device& dev, DType precision, DType saved) {
  if (precision == DType::bf16) return dev.storage_cost(DType::bf16);
  return saved == DType::bf16 ? 1.08 : 1.0;
}

std::vector<FitPrecision> default_fit_precisions(const Device& dev) {
  if (!dev.stores(DType::bf16)) return {{DType::f32, DType::f32, 1.0}};
  return {{DType::f32, DType::f32, 1.0},
          {DType::bf16, DType::f32, storage_time_factor(dev, DType::bf16, DType::f32)},
          {DType::f32, DType::bf16, storage_time_factor(dev, DType::f32, DType::bf16)}};
}

std::vector<FitState> approx_fit_states(const OptimizerConfig& cfg, bool state_free, bool weights_free,
                                        bool grads_free) {
  std::vector<std::pair<std::string, double>> states{{cfg.state, 0.0}};
  if (state_free && cfg.state == "fp32" && optimizer_state_floats(cfg) > 0)
    states = {{"fp32", 0.0}, {"bf16", 0.4e-9}, {"8bit", 0.8e-9}};
  std::vector<std::pair<DType, double>> weights{{DType::f32, 0.0}};
  if (weights_free && cfg.kind != "adafactor") weights.push_back({DType::bf16, 0.5e-9});
  std::vector<DType> grads{DType::f32};
  if (grads_free && cfg.kind != "adafactor") grads.push_back(DType::bf16);
  if (states.size() == 1 && weights.size() == 1 && grads.size() == 1) return {};
  std::vector<FitState> r;
  for (DType gr : grads)
    for (const auto& [w, wc] : weights)
      for (const auto& [s, sc] : states) r.push_back({s, w, sc + wc, gr});
  return r;
}

int64_t rows_per_sample(const StepSpec& spec) {
  for (const TensorSpec& t : spec.data)
    if (t.dtype == DType::i32 && t.shape.size() == 1) return std::max<int64_t>(1, t.shape[0]);
  return 1;
}

FitResult search_fit(const StepSpec& base, int64_t batch, const std::vector<FitData>& data, size_t budget,
                     const ExecConfig& cfg, double flops_per_second, const std::vector<FitPrecision>& precisions_in,
                     const std::vector<FitState>& states_in, const std::vector<std::string>& offloads_in,
                     const TierSpeed& tier, const std::vector<int>& aheads_in) {
  FitResult r;
  r.smallest.total_bytes = SIZE_MAX;
  const StepCosts costs = device_of(cfg).step_costs();
  const std::vector<FitPrecision> precisions =
      precisions_in.empty() ? std::vector<FitPrecision>{{base.precision, base.saved, 1.0}} : precisions_in;
  const std::vector<FitState> states =
      states_in.empty() ? std::vector<FitState>{{base.effective_state(), base.master_weights, 0.0, base.accumulated_grads}}
                        : states_in;
  const std::vector<std::string> offloads = offloads_in.empty() ? std::vector<std::string>{base.offload} : offloads_in;
  if (!offloads_in.empty() && !tier.measured()) throw std::logic_error("search_fit: offloads without the tier's speed");
  std::set<std::pair<std::string, size_t>> tiered_seen;
  for (const std::string& offload : offloads)
  for (const int ahead : offload.empty() || aheads_in.empty() ? std::vector<int>{base.offload_ahead} : aheads_in)
  for (int64_t k = 1; k <= batch; k *= 2) {
    if (batch % k) continue;
    for (const FitState& st : states)
    for (const FitPrecision& fp : precisions)
    for (const char* rc : {"auto", "cheap", "segments"})
    for (const bool in_backward : {false, true}) {
      // What backward does with each gradient once it is made. One process:
      // update its parameter there (update in backward), which needs one
      // micro-batch, no global-norm clipping and no fp16 step to skip.
      // Several ranks with sharded state: send it to its owner and free it
      // (sharded gradients, ZeRO-2), with one micro-batch.
      const bool several = base.ranks > 1;
      const bool uib = in_backward && !several, zero2 = in_backward && several;
      if (uib && (k > 1 || base.optimizer.clip_grad_norm > 0 || fp.precision == DType::f16)) continue;
      if (zero2 && (k > 1 || base.optimizer.shards < 2)) continue;
      if (fp.precision == DType::f16 && base.ranks > 1) continue;  // loss scaling decides per rank
      // bf16 accumulated gradients: only where there is accumulation (else
      // the same plan as fp32's), in one process and without fp16's check.
      if (st.grads == DType::bf16 && (k == 1 || in_backward || several || fp.precision == DType::f16)) continue;
      StepPolicy p;
      p.batch = batch / k;
      p.accumulation = k;
      p.recompute = rc;
      p.update_in_backward = uib;
      p.shard_gradients = zero2 || (base.shard_gradients && k == 1);
      p.precision = fp.precision;
      p.saved = fp.saved;
      p.optimizer_state = st.state;
      p.master_weights = st.weights;
      p.accumulated_grads = k > 1 ? st.grads : DType::f32;
      p.offload = offload;
      p.offload_ahead = ahead;
      StepSpec s = base;
      s.policy() = p;
      std::unique_ptr<StepGraph> sg;
      try {
        sg = build_step_graph(s);
      } catch (const GraphError&) {
        if (offload.empty()) throw;
        continue;  // the tier pass cannot split this step's update (global-norm clipping)
      }
      if (!offload.empty()) {  // a larger set that tiers no more (no frozen weights): the smaller one's plan
        StepPolicy q = p;
        q.offload.clear();
        if (!tiered_seen.insert({q.describe(), sg->tier.bytes}).second) continue;
      }
      // The plan alone: no executor, and each distinct layer's kernel is
      // built once across all candidates (plan_for's cache).
      const Plan plan = plan_for(sg->g, cfg);
      const double flops = graph_flops(sg->g);
      double trainable = 0;
      for (ValueId v : sg->g.trainable_params()) trainable += static_cast<double>(numel(sg->g.value(v).shape));
      const double seconds =
          fp.time_factor * predict_step_seconds(costs, flops_per_second, flops, p.batch * rows_per_sample(base), k,
                                                sg->g.num_nodes()) +
          st.seconds_per_param * trainable +
          (p.accumulated_grads == DType::bf16 ? kBf16AccumulateSeconds * trainable * static_cast<double>(k) : 0.0);
      const double micro_compute = fp.time_factor * predict_step_seconds(costs, flops_per_second, flops,
                                                                         p.batch * rows_per_sample(base), 1,
                                                                         sg->g.num_nodes());
      const double io = offload.empty() || !tier.measured()
                            ? 0.0
                            : static_cast<double>(k) * tier_io_time(sg->g, plan, micro_compute, tier).exposed;
      for (const FitData& d : data) {
        FitCandidate cand;
        cand.io_seconds = io;
        cand.policy = p;
        cand.policy.data_in = data.size() > 1 ? d.data_in : "";
        cand.total_bytes = d.fixed_bytes + plan.total_bytes();
        cand.disk_bytes = plan.arena_bytes[static_cast<size_t>(Arena::Tier)];
        cand.step_flops = flops * static_cast<double>(k);
        cand.predicted_seconds = seconds + io + d.seconds_per_sample * static_cast<double>(batch);
        if (cand.total_bytes < r.smallest.total_bytes) r.smallest = cand;
        const bool disk_fits = tier.available_bytes == 0 || cand.disk_bytes <= tier.available_bytes;
        if (cand.total_bytes <= budget && disk_fits) r.fitting.push_back(cand);
        if (cand.total_bytes <= budget && !disk_fits &&
            (r.over_disk.disk_bytes == 0 || cand.disk_bytes < r.over_disk.disk_bytes))
          r.over_disk = cand;
      }
    }
  }
  std::stable_sort(r.fitting.begin(), r.fitting.end(),
                   [](const FitCandidate& a, const FitCandidate& b) { return a.predicted_seconds < b.predicted_seconds; });
  return r;
}

TierTime tier_io_time(const Graph& g, const Plan& plan, double compute_seconds, const TierSpeed& tier) {
  TierTime r;
  if (!tier.measured()) return r;
  // Each node's compute: the per-node cost, the rest by flops.
  double total = 0;
  std::vector<double> f(g.num_nodes(), 0.0);
  for (size_t k = 0; k < g.num_nodes(); ++k) {
    const Node& n = g.node(static_cast<NodeId>(k));
    if (const auto& fl = op_def(n.op).flops) total += f[k] = fl(g, n);
  }
  const double per_node = std::min(20e-6, compute_seconds / std::max<double>(1.0, static_cast<double>(g.num_nodes())));
  const double by_flops = std::max(0.0, compute_seconds - per_node * static_cast<double>(g.num_nodes()));
  double step = 0, io = 0, compute = 0;  // the two clocks
  std::vector<double> done(g.num_values(), 0.0);
  for (size_t k = 0; k < g.num_nodes(); ++k) {
    const Node& n = g.node(static_cast<NodeId>(k));
    const OpTraits::TierIo kind = op_def(n.op).traits.tier_io;
    if (kind == OpTraits::TierIo::Load || kind == OpTraits::TierIo::Store) {
      const ValueId buf = kind == OpTraits::TierIo::Load ? n.outputs.at(0) : n.inputs.at(0);
      const double t = static_cast<double>(plan.values.at(static_cast<size_t>(buf)).bytes) /
                       (kind == OpTraits::TierIo::Load ? tier.read_bytes_per_second : tier.write_bytes_per_second);
      r.io += t;
      io = std::max(io, step) + t;
      if (n.attrs.i("async", 0)) done[static_cast<size_t>(buf)] = io;
      else step = io;
    } else if (kind == OpTraits::TierIo::Wait) {
      step = std::max(step, done[static_cast<size_t>(n.inputs.at(0))]);
    } else {
      const double t = per_node + (total > 0 ? by_flops * f[k] / total : 0.0);
      step += t;
      compute += t;
    }
  }
  r.exposed = std::max(0.0, step - compute);
  return r;
}

const std::vector<std::string>& fit_offloads() {
  static const std::vector<std::string> sets{"state", "frozen,state", "all"};
  return sets;
}

}  // namespace memfit::train
