// Checks of fast kernels against the reference kernels in double, shared by
// the kernel suites (test_norm_kernels.cpp, test_activation.cpp): a graph
// run once with guard bytes after every planned buffer and NaN-poisoned
// arenas, element-wise comparison with a per-element tolerance, and the
// reference kernel run on double vectors as the oracle.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kernel_cases.hpp"
#include "kernels/bf16.hpp"
#include "kernels/kernel.hpp"
#include "memfit/runtime.hpp"

namespace memfit::testing::kernel_check {

constexpr double kRel = 1.0 / 128;
constexpr double kTiny = 1.1754943508222875e-38;  // 2^-126

using Feed = std::map<ValueId, std::vector<float>>;

inline std::vector<float> uniform(size_t n, uint64_t seed, float lo, float hi, bool bf16) {
  std::vector<float> v = memfit::testing::random_floats(n, seed, lo, hi);
  if (bf16)
    for (float& x : v) x = kernels::round_bf16(x);
  return v;
}
inline std::vector<double> dbl(const std::vector<float>& v) { return {v.begin(), v.end()}; }

struct Result {
  std::map<ValueId, std::vector<float>> out;
  std::vector<std::string> kernels;  // per node
};

// Runs g once on `backend` (guard bytes, NaN-poisoned arenas) and reads `read`.
inline Result run(const Graph& g, Backend backend, const Feed& feed, const std::vector<ValueId>& read, bool in_place = true) {
  ExecConfig cfg;
  cfg.backend = backend;
  cfg.verify = true;
  cfg.plan.guard_bytes = 64;
  cfg.plan.in_place = in_place;
  Executor ex(g, cfg);
  ex.init_params(1);
  ex.poison(0xFF);
  for (auto& [v, d] : feed) {
    if (g.value(v).dtype == DType::f32) {
      ex.write_f32(v, d.data());
      continue;
    }
    auto* p = ex.ptr<kernels::bf16_t>(v);  // bf16 storage (Executor::write_f32 takes f32 values only)
    for (size_t i = 0; i < d.size(); ++i) p[i] = kernels::f32_to_bf16(d[i]);
  }
  ex.run(kernels::StepContext{});
  EXPECT_TRUE(ex.guards_intact()) << backend_name(backend) << ": " << ex.broken_guard();
  Result r;
  for (ValueId v : read) {
    std::vector<float>& o = r.out[v];
    o.resize(static_cast<size_t>(numel(g.value(v).shape)));
    if (g.value(v).dtype == DType::f32) {
      ex.read_f32(v, o.data());
      continue;
    }
    const auto* p = ex.ptr<kernels::bf16_t>(v);
    for (size_t i = 0; i < o.size(); ++i) o[i] = kernels::bf16_to_f32(p[i]);
  }
  for (size_t k = 0; k < g.num_nodes(); ++k) r.kernels.push_back(ex.kernel_name(k));
  return r;
}

// The largest |got - want| / tol per check name, over the running test;
// printed (and cleared) by print_worst() at its end.
inline std::map<std::string, double>& worst_of() {
  static std::map<std::string, double> w;
  return w;
}
inline void print_worst() {
  for (auto& [k, v] : worst_of()) std::printf("    %-8s max %.3g of the tolerance\n", k.c_str(), v);
  worst_of().clear();
}

// |got - want| <= tol(i) everywhere, got finite.
inline void expect_close(const std::string& what, const std::vector<float>& got, const std::vector<double>& want,
                  const std::function<double(size_t)>& tol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(static_cast<double>(got[i]) - want[i]), t = tol(i);
    worst = std::max(worst, t > 0 ? d / t : (d > 0 ? 1e9 : 0.0));
    if (!std::isfinite(got[i]) || !(d <= t)) {
      if (++bad <= 5) ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << " want " << want[i] << " tol " << t;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements off";
  double& w = worst_of()[what];
  w = std::max(w, worst);
}

// The oracle's values rounded as the kernel's storage rounds them.
inline std::vector<double> stored(const std::vector<double>& v, bool bf16) {
  std::vector<double> r(v);
  if (bf16)
    for (double& x : r) x = kernels::round_bf16(static_cast<float>(x));
  return r;
}
inline std::vector<double> as_f32(const std::vector<double>& v) {
  std::vector<double> r(v);
  for (double& x : r) x = static_cast<float>(x);
  return r;
}

// Runs reference kernel K<double> on vectors.
template <template <class> class K, class P>
void oracle(const P& p, std::vector<std::vector<double>*> ins, std::vector<std::vector<double>*> outs) {
  K<double> k(p);
  std::vector<void*> ip, op;
  for (auto* v : ins) ip.push_back(v->data());
  for (auto* v : outs) op.push_back(v->data());
  k.bind(ip, op, nullptr);
  k.run(kernels::StepContext{});
}

inline const char* tname(bool bf16) { return bf16 ? "bf16" : "f32"; }
inline DType storage(bool bf16) { return bf16 ? DType::bf16 : DType::f32; }


}  // namespace memfit::testing::kernel_check
