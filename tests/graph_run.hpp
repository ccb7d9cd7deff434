// Runs a small graph once on one backend with given data and reads values
// back as f32 (test_ops_embed, test_cpu_embed; i32 values are converted,
// exact below 2^24). Every planned buffer has guard bytes after it, checked
// after each node: a kernel that writes past its output fails the test. bf16
// values are written rounded (nearest even) and read widened, so a test can
// hand both backends the same exact values.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "kernels/bf16.hpp"
#include "kernels/kernel.hpp"
#include "memfit/runtime.hpp"

namespace memfit::testing {

struct GraphData {
  std::map<ValueId, std::vector<float>> floats;  // f32 or bf16 values
  std::map<ValueId, std::vector<int32_t>> ints;  // i32 values
};

using Values = std::map<ValueId, std::vector<float>>;

inline Values run_graph(const Graph& g, Backend backend, const GraphData& data, const std::vector<ValueId>& read) {
  ExecConfig cfg;
  cfg.backend = backend;
  cfg.verify = true;
  cfg.plan.guard_bytes = 64;
  Executor ex(g, cfg);
  ex.init_params(5);
  ex.poison(0xFF);
  for (const auto& [v, x] : data.floats) {
    if (g.value(v).dtype == DType::bf16) kernels::f32_to_bf16(x.data(), ex.ptr<kernels::bf16_t>(v), x.size());
    else ex.write_f32(v, x.data());
  }
  for (const auto& [v, x] : data.ints) std::memcpy(ex.data(v), x.data(), x.size() * sizeof(int32_t));
  ex.run(kernels::StepContext{});
  EXPECT_TRUE(ex.guards_intact()) << backend_name(backend) << ": " << ex.broken_guard();
  Values out;
  for (ValueId v : read) {
    std::vector<float>& o = out[v];
    o.resize(static_cast<size_t>(numel(g.value(v).shape)));
    if (g.value(v).dtype == DType::bf16) {
      kernels::bf16_to_f32(ex.ptr<kernels::bf16_t>(v), o.data(), o.size());
    } else if (g.value(v).dtype == DType::i32) {  // exact below 2^24
      const int32_t* p = ex.ptr<int32_t>(v);
      for (size_t i = 0; i < o.size(); ++i) o[i] = static_cast<float>(p[i]);
    } else {
      ex.read_f32(v, o.data());
    }
  }
  return out;
}

// a and b hold the same bits (NaN payloads included).
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The CPU kernels against the reference on g: every value in `read` within
// 1e-6 + 1e-5 x the reference's largest magnitude (f32 kernels that sum in
// another order; the recurrent layers' tests), naming the first few
// elements off; and the CPU run again gives the same bits (a fixed
// summation order). Returns the CPU's values.
inline Values expect_cpu_matches_reference(const Graph& g, const GraphData& d, const std::vector<ValueId>& read) {
  const Values cpu = run_graph(g, Backend::Cpu, d, read);
  const Values ref = run_graph(g, Backend::Reference, d, read);
  for (ValueId v : read) {
    const auto& a = cpu.at(v);
    const auto& e = ref.at(v);
    double mx = 0;
    for (float f : e) mx = std::max(mx, double(std::abs(f)));
    const double tol = 1e-6 + 1e-5 * mx;
    size_t bad = 0;
    for (size_t i = 0; i < a.size(); ++i)
      if (!(std::abs(double(a[i]) - e[i]) <= tol) && ++bad <= 3)
        ADD_FAILURE() << g.value(v).name << "[" << i << "]: cpu " << a[i] << " ref " << e[i] << " tol " << tol;
    EXPECT_EQ(bad, 0u) << g.value(v).name;
  }
  const Values again = run_graph(g, Backend::Cpu, d, read);
  for (ValueId v : read) EXPECT_TRUE(same_bits(cpu.at(v), again.at(v))) << g.value(v).name;
  return cpu;
}

}  // namespace memfit::testing
