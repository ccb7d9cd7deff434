#include <cmath>
#include <stdexcept>

#include "memfit/optim.hpp"

namespace memfit {

void check_optimizer(const OptimizerConfig& c) {
  if (c.kind != "sgd" && c.kind != "adam" && c.kind != "adamw" && c.kind != "adafactor")
    throw std::invalid_argument("unknown optimizer '" + c.kind + "' (expected sgd, adam, adamw or adafactor)");
  if (c.state != "fp32" && c.state != "bf16" && c.state != "8bit")
    throw std::invalid_argument("unknown optimizer state '" + c.state + "' (expected fp32, bf16 or 8bit)");
  if (c.kind == "adafactor" && c.state != "fp32")
    throw std::invalid_argument("adafactor keeps a factored fp32 second moment (a few bytes per row and column); "
                                "--optimizer-state " + c.state + " applies to adam, adamw and sgd");
  if (c.quantise_min < 0) throw std::invalid_argument("quantise_min must not be negative");
  if (c.shards < 1 || c.shard < 0 || c.shard >= c.shards)
    throw std::invalid_argument("optimizer shard " + std::to_string(c.shard) + " of " + std::to_string(c.shards));
  if (c.shards > 1 && c.clip_grad_norm > 0)
    throw std::invalid_argument("--clip-grad-norm needs the global norm of every gradient, and with sharded optimizer "
                                "state each rank updates only its own parameters: pass --shard-optimizer off to clip");
}

size_t optimizer_state_floats(const OptimizerConfig& c) {
  check_optimizer(c);
  if (c.kind == "sgd") return c.momentum != 0.0 ? 1 : 0;
  if (c.kind == "adafactor") return 0;
  return 2;
}

std::string optimizer_state_policy(const OptimizerConfig& c) {
  if (c.kind == "adafactor") return "adafactor factored";
  if (optimizer_state_floats(c) == 0) return "none";
  return c.state;
}

namespace {

// Adafactor's factored view of a parameter: rows x (n / rows), or 0 rows
// for a 1-d parameter (its second moment is kept whole). A tensor of more
// than two axes folds its trailing axes into the columns (a convolution's
// [K, C, R, S] is K x C R S).
int64_t factored_rows(const Shape& s) { return s.size() >= 2 ? s[0] : 0; }

ValueId state_value(Graph& g, const std::string& name, Shape shape, DType dt) {
  Value v;
  v.name = name;
  v.shape = std::move(shape);
  v.dtype = dt;
  v.cls = VClass::OptState;
  return g.add_value(v);
}

}  // namespace

std::vector<ValueId> updated_params(const Graph& g) {
  std::vector<ValueId> out;
  for (ValueId p : g.trainable_params())
    if (g.value(p).grad != kNone) out.push_back(p);  // (one without does not reach the loss)
  return out;
}

std::vector<size_t> shard_bounds(const Graph& g, int shards) {
  const std::vector<ValueId> ps = updated_params(g);
  const size_t n = ps.size(), S = static_cast<size_t>(std::max(shards, 1));
  if (n < S)
    throw GraphError("cannot shard the optimizer state of " + std::to_string(n) + " parameter tensors over " +
                     std::to_string(S) + " ranks (each rank needs at least one); use fewer ranks or "
                     "--shard-optimizer off");
  std::vector<double> prefix(n + 1, 0.0);  // elements before tensor i
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + static_cast<double>(numel(g.value(ps[i]).shape));
  std::vector<size_t> b(S + 1, 0);
  b[S] = n;
  for (size_t s = 1; s < S; ++s) {
    const double want = prefix[n] * static_cast<double>(s) / static_cast<double>(S);
    // The boundary nearest the equal share, leaving every shard a tensor.
    size_t best = std::max(b[s - 1] + 1, size_t(1));
    for (size_t i = best; i <= n - (S - s); ++i)
      if (std::abs(prefix[i] - want) < std::abs(prefix[best] - want)) best = i;
    b[s] = best;
  }
  return b;
}

NodeId append_optimizer(Graph& g, const OptimizerConfig& c) {
  const size_t moments = optimizer_state_floats(c);
  std::vector<ValueId> params, grads;
  std::vector<int64_t> decay;  // per tensor, 0/1
  const std::vector<ValueId> all = updated_params(g);
  size_t lo = 0, hi = all.size();
  if (c.shards > 1) {
    const std::vector<size_t> b = shard_bounds(g, c.shards);
    lo = b[static_cast<size_t>(c.shard)];
    hi = b[static_cast<size_t>(c.shard) + 1];
  }
  for (size_t i = lo; i < hi; ++i) {
    const ValueId p = all[i];
    params.push_back(p);
    grads.push_back(g.value(p).grad);
    decay.push_back(c.decay_bias_and_norm || !g.value(p).no_weight_decay ? 1 : 0);  // the model's groups
  }
  if (params.empty()) throw GraphError("nothing to train: no parameter has a gradient");
  std::vector<ValueId> ins = params;
  ins.insert(ins.end(), grads.begin(), grads.end());
  Attrs a{{"kind", c.kind},
          {"momentum", c.momentum},
          {"nesterov", int64_t(c.nesterov)},
          {"weight_decay", c.weight_decay},
          {"decay", decay},
          {"beta1", c.beta1},
          {"beta2", c.beta2},
          {"eps", c.eps},
          {"clip_norm", c.clip_grad_norm},
          {"count", static_cast<int64_t>(params.size())}};
  std::string op;
  int64_t groups = 0;
  if (c.kind == "adafactor") {
    std::vector<int64_t> rows;
    for (ValueId p : params) rows.push_back(factored_rows(g.value(p).shape));
    for (size_t i = 0; i < params.size(); ++i) {
      const Value& p = g.value(params[i]);
      ins.push_back(rows[i] ? state_value(g, p.name + ".exp_avg_sq_row", {rows[i]}, DType::f32)
                            : state_value(g, p.name + ".exp_avg_sq", p.shape, DType::f32));
    }
    for (size_t i = 0; i < params.size(); ++i) {
      const Value& p = g.value(params[i]);
      // Unfactored: a one-element placeholder, never read.
      ins.push_back(state_value(g, p.name + ".exp_avg_sq_col", {rows[i] ? numel(p.shape) / rows[i] : 1}, DType::f32));
    }
    groups = 2;
    op = "adafactor_update";
    a.set("rows", rows).set("eps1", c.eps1).set("eps2", c.eps2).set("clip_threshold", c.clip_threshold);
    a.set("decay_rate", c.decay_rate).set("relative_step", int64_t(c.relative_step));
  } else {
    // 8bit: which tensors are quantised (the others keep f32 moments).
    std::vector<int64_t> blockwise;
    for (ValueId p : params) blockwise.push_back(c.state == "8bit" && numel(g.value(p).shape) >= c.quantise_min);
    const char* suffix[2] = {c.kind == "sgd" ? ".momentum" : ".exp_avg", ".exp_avg_sq"};
    for (size_t s = 0; s < moments; ++s)
      for (size_t i = 0; i < params.size(); ++i) {
        const Value& p = g.value(params[i]);
        const DType dt = c.state == "bf16" ? DType::bf16 : blockwise[i] ? DType::u8 : DType::f32;
        ins.push_back(state_value(g, p.name + suffix[s], p.shape, dt));
      }
    groups = static_cast<int64_t>(moments);
    if (c.state == "8bit" && moments > 0) {
      for (size_t i = 0; i < params.size(); ++i) {
        const Value& p = g.value(params[i]);
        // A tensor that keeps f32 moments has a one-element placeholder (a
        // graph value has at least one element), never read.
        const Shape shape = blockwise[i] ? Shape{static_cast<int64_t>(moments), (numel(p.shape) + kQuantBlock - 1) / kQuantBlock}
                                         : Shape{1};
        ins.push_back(state_value(g, p.name + ".absmax", shape, DType::f32));
      }
      ++groups;
      a.set("blockwise", blockwise).set("block", kQuantBlock);
    }
    op = c.kind == "sgd" ? "sgd_update" : "adam_update";
  }
  a.set("state", c.state).set("states", groups);
  g.add_node(op, ins, a, "optimizer", Phase::Update);
  return static_cast<NodeId>(g.num_nodes() - 1);
}

}  // namespace memfit
