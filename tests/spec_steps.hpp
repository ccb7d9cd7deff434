// Training steps of a StepSpec on deterministic inputs, from poisoned
// transient and gradient arenas (an element read before it is written turns
// into NaN): the losses and every parameter, buffer and optimizer state
// after them, as f32. Tests of passes that must not change the arithmetic
// (update in backward, tiering) compare two such runs bit for bit.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kernels/kernel.hpp"
#include "memfit/runtime.hpp"
#include "runtime/tier_store.hpp"
#include "compile/step_graph.hpp"

namespace memfit::testing {

inline uint64_t tier_bytes_read(const Executor& ex) { return ex.tier()->bytes_read(); }
inline uint64_t tier_bytes_written(const Executor& ex) { return ex.tier()->bytes_written(); }

struct Trained {
  std::vector<float> losses;
  std::map<std::string, std::vector<float>> state;  // f32 parameters, buffers, optimizer state
  std::map<std::string, std::vector<uint8_t>> bytes;  // every one of them as stored
  Plan plan;
  // The tier store's bytes read and written by the steps, all of them
  // (not the initial values nor the final reads; no store: 0).
  uint64_t tier_read = 0, tier_written = 0;
};

// The two small steps these tests train: gpt-tiny (batch 2 x 16 tokens of a
// 30-token vocabulary) and the ConvNet (batch 8), with or without update in
// backward.
inline train::StepSpec gpt_tiny_spec(const std::string& optimizer, bool uib) {
  train::StepSpec s;
  s.model = "gpt-tiny";
  s.batch = 2;
  constexpr int64_t T = 16, V = 30;
  s.data = {{"tokens", DType::i32, {T}, 0.0, V}, {"targets", DType::i32, {T}, -1.0, V}};
  s.classes = V;
  s.optimizer.kind = optimizer;
  s.update_in_backward = uib;
  return s;
}

inline train::StepSpec convnet_spec(bool uib) {
  train::StepSpec s;
  s.model = "convnet";
  s.batch = 8;
  s.update_in_backward = uib;
  return s;
}

inline Trained train_steps(const train::StepSpec& spec, int steps, const ExecConfig& cfg = {}) {
  const auto sg = train::build_step_graph(spec);
  const Graph& g = sg->g;
  Executor ex(g, cfg);
  ex.init_params(5);
  ex.poison(0xFF);
  kernels::StepContext ctx;
  ctx.lr = spec.optimizer.kind == "sgd" ? 0.02 : 3e-3;
  ctx.seed = 9;
  Trained r;
  const uint64_t read0 = ex.tier() ? tier_bytes_read(ex) : 0, written0 = ex.tier() ? tier_bytes_written(ex) : 0;
  for (int step = 0; step < steps; ++step) {
    for (const train::StepInput& in : sg->inputs) {
      const size_t n = static_cast<size_t>(numel(g.value(in.value).shape));
      if (in.spec.dtype == DType::i32) {
        const uint64_t range = static_cast<uint64_t>(in.spec.range > 0 ? in.spec.range : spec.classes);
        std::vector<int32_t> v(n);
        for (size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(((i + 13 * step) * 2654435761u) % range);
        ex.feed(in.value, v.data(), n * 4);
      } else {
        std::vector<float> v(n);
        for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(((i + 7 * step) * 2654435761u) % 997) / 997.0f - 0.5f;
        ex.write_f32(in.value, v.data());
      }
    }
    ctx.step = step;
    ex.run(ctx);
    r.losses.push_back(static_cast<float>(ex.fetch_scalar(sg->loss)));
  }
  r.plan = ex.plan();
  if (ex.tier()) {
    r.tier_read = tier_bytes_read(ex) - read0;
    r.tier_written = tier_bytes_written(ex) - written0;
  }
  for (size_t v = 0; v < g.num_values(); ++v) {
    const Value& val = g.value(static_cast<ValueId>(v));
    if (val.cls != VClass::Param && val.cls != VClass::Buffer && val.cls != VClass::OptState) continue;
    std::vector<uint8_t> raw(ex.value_bytes(static_cast<ValueId>(v)));
    ex.fetch(static_cast<ValueId>(v), raw.data(), raw.size());
    r.bytes[val.name] = std::move(raw);
    if (val.dtype != DType::f32) continue;
    std::vector<float> w(static_cast<size_t>(numel(val.shape)));
    ex.read_f32(static_cast<ValueId>(v), w.data());
    r.state[val.name] = std::move(w);
  }
  return r;
}

}  // namespace memfit::testing
