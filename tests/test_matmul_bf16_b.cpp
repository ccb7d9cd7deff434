// The f32 matmul reading a bf16 weight panel by panel (kernels::cpu::
// make_matmul_bf16_b: bf16 master weights under fp32 activations, GPT's
// tied head and its backward-data): against a double-precision product of
// the same values, on odd shapes whose panels do not divide the weight
// (panel sizes forced small), in both of its forms (b's rows as columns of
// c, and as slices of the reduction added into c), with a transposed and a
// batched a; and in a step graph, its scratch is one panel, not the weight.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/bf16.hpp"
#include "memfit/rng.hpp"
#include "memfit/runtime.hpp"
#include "ops/linear/cpu.hpp"
#include "compile/step_graph.hpp"

using namespace memfit;
using memfit::kernels::bf16_t;

namespace {

float value(uint64_t seed, int64_t i) { return rng::uniform_sym(rng::stream_key(seed, 17, 0), static_cast<uint64_t>(i), 1.0f); }

struct Case {
  int64_t B, M, N, K;
  bool ta, tb;
  size_t panel_bytes;
};

// c = op(a) op(b) in double from the f32 a and the bf16 b's values, and
// each element's sum of |products|: an f32 product summing K terms in any
// order is within K 2^-24 (2 + K 2^-24) of that sum (the standard bound
// of a dot product's rounding, gamma_K with unit roundoff 2^-24).
void check(const Case& cs) {
  SCOPED_TRACE("B " + std::to_string(cs.B) + " M " + std::to_string(cs.M) + " N " + std::to_string(cs.N) + " K " +
               std::to_string(cs.K) + " ta " + std::to_string(cs.ta) + " tb " + std::to_string(cs.tb) + " panel " +
               std::to_string(cs.panel_bytes));
  kernels::MatmulParams p;
  p.B = cs.B;
  p.M = cs.M;
  p.N = cs.N;
  p.K = cs.K;
  p.trans_a = cs.ta;
  p.trans_b = cs.tb;
  p.a_batch = cs.B;
  p.b_batch = 1;
  auto k = kernels::cpu::make_matmul_bf16_b(p, cs.panel_bytes);
  ASSERT_TRUE(k) << "no kernel";
  std::vector<float> a(static_cast<size_t>(cs.B * cs.M * cs.K)), c(static_cast<size_t>(cs.B * cs.M * cs.N), 7.0f);
  std::vector<bf16_t> b(static_cast<size_t>(cs.K * cs.N));
  for (size_t i = 0; i < a.size(); ++i) a[i] = value(1, static_cast<int64_t>(i));
  for (size_t i = 0; i < b.size(); ++i) b[i] = kernels::f32_to_bf16(value(2, static_cast<int64_t>(i)));
  std::vector<std::byte> scratch(k->scratch_bytes() + 64);
  k->bind({a.data(), b.data()}, {c.data()}, k->scratch_bytes() ? scratch.data() : nullptr);
  kernels::StepContext ctx;
  k->run(ctx);
  k->run(ctx);  // twice: the panels that add into c start from the first one's product each time
  auto A = [&](int64_t bt, int64_t m, int64_t kk) {
    return static_cast<double>(cs.ta ? a[static_cast<size_t>(bt * cs.M * cs.K + kk * cs.M + m)]
                                     : a[static_cast<size_t>(bt * cs.M * cs.K + m * cs.K + kk)]);
  };
  auto Bv = [&](int64_t kk, int64_t n) {
    return static_cast<double>(kernels::bf16_to_f32(cs.tb ? b[static_cast<size_t>(n * cs.K + kk)]
                                                          : b[static_cast<size_t>(kk * cs.N + n)]));
  };
  const double gamma = static_cast<double>(cs.K) * std::ldexp(1.0, -24) * (2 + static_cast<double>(cs.K) * std::ldexp(1.0, -24));
  for (int64_t bt = 0; bt < cs.B; ++bt)
    for (int64_t m = 0; m < cs.M; ++m)
      for (int64_t n = 0; n < cs.N; ++n) {
        double s = 0, abs_sum = 0;
        for (int64_t kk = 0; kk < cs.K; ++kk) {
          s += A(bt, m, kk) * Bv(kk, n);
          abs_sum += std::abs(A(bt, m, kk) * Bv(kk, n));
        }
        const double got = c[static_cast<size_t>((bt * cs.M + m) * cs.N + n)];
        ASSERT_LE(std::abs(got - s), gamma * abs_sum + 1e-30) << "c[" << bt << "," << m << "," << n << "]";
      }
}

}  // namespace

TEST(MatmulBf16B, PanelsMatchADoubleProduct) {
  // 64-row panels at the smallest: 4 KiB per panel row set forces several
  // panels and a remainder on these shapes.
  for (bool tb : {true, false})
    for (bool ta : {false, true})
      for (size_t panel : {size_t(1), size_t(64) * 300 * 4, size_t(64) << 20}) {
        check({1, 37, 301, 150, ta, tb, panel});
        if (!ta) check({3, 5, 211, 70, ta, tb, panel});  // a batch folded into a's rows
      }
}

// GPT's tied head with bf16 master weights under fp32 activations: the
// forward and backward-data matmuls read the bf16 token table through this
// kernel, whose scratch is at most a panel (plus the product's own
// scratchpad), not the widened table (vocabulary x width x 4 bytes).
TEST(MatmulBf16B, TiedHeadScratchIsAPanel) {
  train::StepSpec s;
  s.model = "gpt2";
  s.batch = 1;
  s.data = {{"tokens", DType::i32, {64}, 0.0, 50257}, {"targets", DType::i32, {64}, -1.0, 50257}};
  s.classes = 50257;
  s.optimizer.kind = "adamw";
  s.master_weights = DType::bf16;
  const auto sg = train::build_step_graph(s);
  ExecConfig cfg;
  cfg.defer_allocation = true;  // the plan only: nothing allocated
  Executor ex(sg->g, cfg);
  const Graph& g = sg->g;
  const ValueId wte = g.find("transformer.wte.weight");
  ASSERT_NE(wte, kNone);
  ASSERT_EQ(g.value(wte).dtype, DType::bf16);
  const size_t widened = static_cast<size_t>(numel(g.value(wte).shape)) * 4;  // 147 MiB
  int readers = 0;
  for (size_t i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(static_cast<NodeId>(i));
    if (n.op != "matmul" || n.inputs[1] != wte) continue;
    ++readers;
    EXPECT_EQ(std::string(ex.kernel_name(i)), "dnnl.matmul.bf16_b_panels") << i;
    EXPECT_LT(ex.plan().scratch[i].bytes, kernels::cpu::kPanelBytes + (size_t(1) << 20)) << i;
    EXPECT_LT(ex.plan().scratch[i].bytes, widened / 16) << i;
  }
  EXPECT_EQ(readers, 2) << "the head's forward and backward-data";
}
