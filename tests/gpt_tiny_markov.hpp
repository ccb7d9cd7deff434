// gpt-tiny's training step on windows of a fixed Markov chain (optimizer
// state and master-weights tests): each token is followed by (7 a + 3) mod V
// with probability 0.7, else by a uniform one (about 1.6 nats of entropy),
// a new batch every step, the same for every run.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "memfit/optim.hpp"
#include "memfit/runtime.hpp"
#include "compile/step_graph.hpp"

namespace memfit::testing {

constexpr int64_t kVocab = 64, kT = 32, kB = 8;

inline train::StepSpec gpt_tiny(const OptimizerConfig& oc, DType weights = DType::f32, DType act = DType::f32) {
  train::StepSpec s;
  s.model = "gpt-tiny";
  s.batch = kB;
  s.data = {{"tokens", DType::i32, {kT}, 0.0, kVocab}, {"targets", DType::i32, {kT}, -1.0, kVocab}};
  s.classes = kVocab;
  s.optimizer = oc;
  s.master_weights = weights;
  s.precision = act;
  return s;
}

inline void feed_markov(Executor& ex, const train::StepGraph& sg, int step) {
  std::mt19937 gen(static_cast<uint32_t>(1000 + step));
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<int32_t> tok(kB * kT), tgt(kB * kT);
  for (int64_t r = 0; r < kB; ++r) {
    int32_t a = static_cast<int32_t>(gen() % kVocab);
    for (int64_t t = 0; t < kT; ++t) {
      const int32_t next = u(gen) < 0.7 ? (7 * a + 3) % kVocab : static_cast<int32_t>(gen() % kVocab);
      tok[static_cast<size_t>(r * kT + t)] = a;
      tgt[static_cast<size_t>(r * kT + t)] = next;
      a = next;
    }
  }
  ex.feed(sg.inputs[0].value, tok.data(), tok.size() * sizeof(int32_t));
  ex.feed(sg.inputs[1].value, tgt.data(), tgt.size() * sizeof(int32_t));
}

}  // namespace memfit::testing
