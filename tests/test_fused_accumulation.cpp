// Accumulation into bf16 gradients fused into the op that makes the
// micro-batch gradient (grad_accumulate_matmul, grad_accumulate_rows;
// autodiff/accumulate.cpp), so that no f32 gradient of a whole table is held:
//  - grad_accumulate_matmul, every transposition and a product of several
//    panels: the CPU kernel and the reference within the stochastic
//    rounding's bound of the exact (double) sum over the micro-batches.
//  - grad_accumulate_rows with repeated and out-of-range ids: the CPU kernel
//    stores the reference's bytes, within the bound of the exact sum.
//  - grad_accumulate into f32 (not fused): the CPU kernel, threaded, stores
//    the reference's bytes.
//  - The rewrite: gpt-tiny's tied table gets a product and then its rows
//    (no grad_accumulate, no f32 transient of the table's size in the plan),
//    and f32 accumulation keeps the plain path (the contrast: it holds one).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/bf16.hpp"
#include "kernels/kernel.hpp"
#include "memfit/plan.hpp"
#include "memfit/rng.hpp"
#include "memfit/runtime.hpp"
#include "compile/step_graph.hpp"

using namespace memfit;
using kernels::bf16_t;
using kernels::bf16_to_f32;

namespace {

float test_value(uint64_t seed, int64_t i, float scale) {
  return rng::uniform_sym(rng::stream_key(seed, 71, 0), static_cast<uint64_t>(i), scale);
}

ExecConfig config(Backend b) {
  ExecConfig c;
  c.backend = b;
  c.verify = true;
  return c;
}

// A parameter [rows, cols] and its bf16 accumulated gradient.
ValueId bf16_grad(Graph& g, const Shape& shape) {
  const ValueId p = g.param("w", shape);
  Value a;
  a.name = "w.grad";
  a.shape = shape;
  a.dtype = DType::bf16;
  a.cls = VClass::ParamGrad;
  a.grad_of = p;
  const ValueId acc = g.add_value(a);
  g.value(p).grad = acc;
  return acc;
}

std::vector<float> values(size_t n, uint64_t seed, float scale) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = test_value(seed, static_cast<int64_t>(i), scale);
  return x;
}

// Each stochastic rounding moves the running sum by less than one bf16
// spacing at it, at most 2^-7 of its magnitude: after k additions the stored
// sum is within 2^-7 sum_j |P_j| of the exact one (P_j the partial sums),
// doubled for the drift of the rounded partials (test_accumulated_grads'
// bound), plus the f32 sums of the products (K terms: K 2^-24 sum |a b| per
// micro-batch, taken as 2^-20 K sum|ab| to cover both kernels' orders).
void expect_within_rounding(const bf16_t* acc, const std::vector<double>& exact, const std::vector<double>& partial_abs,
                            const std::vector<double>& product_abs, int64_t K, const std::string& who) {
  for (size_t i = 0; i < exact.size(); ++i) {
    const double e = static_cast<double>(bf16_to_f32(acc[i])) - exact[i];
    const double bound = 2.0 * std::ldexp(partial_abs[i], -7) + std::ldexp(product_abs[i], -20) * static_cast<double>(K);
    ASSERT_LE(std::abs(e), bound) << who << ": element " << i << " holds " << bf16_to_f32(acc[i]) << ", exact "
                                  << exact[i];
  }
}

struct MatmulCase {
  int64_t M, N, K;
  bool ta, tb;
  bool first;
};

}  // namespace

// Three micro-batches into one accumulator. The CPU kernel computes the
// product a panel of rows at a time (about 4 MiB of f32 rows): the 3001 x
// 401 case takes two panels, the last a partial one. first = 0: the
// accumulator's values before micro-batch 0 stay in the sum.
TEST(FusedAccumulation, MatmulWithinTheRoundingOfTheExactSum) {
  const std::vector<MatmulCase> cases = {{37, 19, 23, false, false, true}, {37, 19, 23, true, false, true},
                                         {37, 19, 23, false, true, true},  {37, 19, 23, true, true, false},
                                         {3001, 401, 7, true, false, true}};
  for (const MatmulCase& c : cases) {
    SCOPED_TRACE("M " + std::to_string(c.M) + " N " + std::to_string(c.N) + " K " + std::to_string(c.K) +
                 (c.ta ? " trans_a" : "") + (c.tb ? " trans_b" : "") + (c.first ? "" : " adding on micro-batch 0"));
    Graph g;
    const ValueId acc = bf16_grad(g, {c.M, c.N});
    const ValueId a = g.input("a", c.ta ? Shape{c.K, c.M} : Shape{c.M, c.K});
    const ValueId b = g.input("b", c.tb ? Shape{c.N, c.K} : Shape{c.K, c.N});
    Attrs at;
    at.set("trans_a", int64_t(c.ta));
    at.set("trans_b", int64_t(c.tb));
    at.set("param", std::string("w"));
    at.set("first", int64_t(c.first));
    at.set("part", int64_t(0));
    g.add_node("grad_accumulate_matmul", {acc, a, b}, std::move(at), "w", Phase::Backward);
    Executor cpu(g, config(Backend::Cpu)), ref(g, config(Backend::Reference));
    EXPECT_EQ(std::string(cpu.kernel_name(0)), "dnnl.grad_accumulate_matmul");
    EXPECT_EQ(std::string(ref.kernel_name(0)), "ref.grad_accumulate_matmul");
    const size_t n = static_cast<size_t>(c.M * c.N);
    std::vector<double> exact(n, 0.0), partial_abs(n, 0.0), product_abs(n, 0.0);
    for (Executor* e : {&cpu, &ref}) e->init_params(1);
    if (!c.first) {
      const std::vector<float> start = values(n, 900, 2.0f);
      for (size_t i = 0; i < n; ++i) {
        const bf16_t v = kernels::f32_to_bf16(start[i]);
        cpu.ptr<bf16_t>(acc)[i] = v;
        ref.ptr<bf16_t>(acc)[i] = v;
        exact[i] = bf16_to_f32(v);
      }
    }
    kernels::StepContext ctx;
    ctx.seed = 11;
    ctx.step = 4;
    for (int64_t m = 0; m < 3; ++m) {
      const std::vector<float> av = values(static_cast<size_t>(c.M * c.K), 10 + m, 1.0f);
      const std::vector<float> bv = values(static_cast<size_t>(c.K * c.N), 20 + m, 1.0f);
      for (Executor* e : {&cpu, &ref}) {
        e->feed(a, av.data(), av.size() * sizeof(float));
        e->feed(b, bv.data(), bv.size() * sizeof(float));
      }
      for (int64_t i = 0; i < c.M; ++i)
        for (int64_t j = 0; j < c.N; ++j) {
          double s = 0, sa = 0;
          for (int64_t k = 0; k < c.K; ++k) {
            const double x = av[static_cast<size_t>(c.ta ? k * c.M + i : i * c.K + k)];
            const double y = bv[static_cast<size_t>(c.tb ? j * c.K + k : k * c.N + j)];
            s += x * y;
            sa += std::abs(x * y);
          }
          const size_t at_ij = static_cast<size_t>(i * c.N + j);
          exact[at_ij] += s;
          partial_abs[at_ij] += std::abs(exact[at_ij]);
          product_abs[at_ij] += sa;
        }
      ctx.micro = m;
      for (Executor* e : {&cpu, &ref}) e->run(ctx);
      expect_within_rounding(cpu.ptr<bf16_t>(acc), exact, partial_abs, product_abs, c.K, "cpu");
      expect_within_rounding(ref.ptr<bf16_t>(acc), exact, partial_abs, product_abs, c.K, "reference");
    }
  }
}

// An embedding's rows: 300 positions over 50 ids, most repeated, some out of
// range (skipped); D = 37 is not a multiple of the kernel's 16-wide blocks.
// first = 1 (zeroes on micro-batch 0) and first = 0 (adds into what is
// there, its own rounding stream, part 1).
TEST(FusedAccumulation, RowsStoreTheReferenceBytes) {
  const int64_t V = 50, D = 37, n = 300;
  for (bool first : {true, false}) {
    SCOPED_TRACE(first ? "first" : "adding");
    Graph g;
    const ValueId acc = bf16_grad(g, {V, D});
    const ValueId ids = g.input("ids", {3, n / 3}, DType::i32);
    const ValueId dy = g.input("dy", {3, n / 3, D});
    Attrs at;
    at.set("param", std::string("w"));
    at.set("first", int64_t(first));
    at.set("part", int64_t(first ? 0 : 1));
    g.add_node("grad_accumulate_rows", {acc, ids, dy}, std::move(at), "w", Phase::Backward);
    Executor cpu(g, config(Backend::Cpu)), ref(g, config(Backend::Reference));
    EXPECT_EQ(std::string(cpu.kernel_name(0)), "cpu.grad_accumulate_rows");
    EXPECT_EQ(std::string(ref.kernel_name(0)), "ref.grad_accumulate_rows");
    for (Executor* e : {&cpu, &ref}) e->init_params(1);
    const size_t tn = static_cast<size_t>(V * D);
    std::vector<double> exact(tn, 0.0), partial_abs(tn, 0.0), product_abs(tn, 0.0);
    // Not first: the accumulator holds a sum already (micro-batch 0 adds).
    const std::vector<float> start = values(tn, 500, 1.0f);
    for (size_t i = 0; i < tn; ++i) {
      const bf16_t v = kernels::f32_to_bf16(first ? 7.0f : start[i]);  // first: overwritten
      cpu.ptr<bf16_t>(acc)[i] = v;
      ref.ptr<bf16_t>(acc)[i] = v;
      if (!first) exact[i] = bf16_to_f32(v);
    }
    kernels::StepContext ctx;
    ctx.seed = 3;
    ctx.step = 8;
    for (int64_t m = 0; m < 3; ++m) {
      std::vector<int32_t> iv(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i)
        iv[static_cast<size_t>(i)] = i % 41 == 0 ? -1 : i % 53 == 0 ? static_cast<int32_t>(V)
                                                 : static_cast<int32_t>((uint64_t(i + 7 * m) * 2654435761u) % 47);
      const std::vector<float> dv = values(static_cast<size_t>(n * D), 40 + m, 1.0f);
      for (Executor* e : {&cpu, &ref}) {
        e->feed(ids, iv.data(), iv.size() * sizeof(int32_t));
        e->feed(dy, dv.data(), dv.size() * sizeof(float));
      }
      std::vector<double> add(tn, 0.0), add_abs(tn, 0.0);
      for (int64_t i = 0; i < n; ++i) {
        const int32_t id = iv[static_cast<size_t>(i)];
        if (id < 0 || id >= V) continue;
        for (int64_t j = 0; j < D; ++j) {
          add[static_cast<size_t>(id * D + j)] += dv[static_cast<size_t>(i * D + j)];
          add_abs[static_cast<size_t>(id * D + j)] += std::abs(dv[static_cast<size_t>(i * D + j)]);
        }
      }
      for (size_t i = 0; i < tn; ++i) {
        exact[i] += add[i];
        partial_abs[i] += std::abs(exact[i]);
        product_abs[i] += add_abs[i];
      }
      ctx.micro = m;
      for (Executor* e : {&cpu, &ref}) e->run(ctx);
      ASSERT_EQ(std::memcmp(cpu.data(acc), ref.data(acc), tn * sizeof(bf16_t)), 0)
          << "the CPU kernel stored other bytes than the reference after micro-batch " << m;
      // A row's sum in f32 over at most n / 47 + 1 positions.
      expect_within_rounding(cpu.ptr<bf16_t>(acc), exact, partial_abs, product_abs, n / 47 + 1, "cpu");
    }
  }
}

// f32 accumulation: a copy on micro-batch 0 and one f32 add after, so the
// threaded CPU kernel and the reference store the same bytes.
TEST(FusedAccumulation, F32GradAccumulateStoresTheReferenceBytes) {
  const int64_t n = 100003;
  Graph g;
  const ValueId p = g.param("w", {n});
  Value a;
  a.name = "w.grad";
  a.shape = {n};
  a.cls = VClass::ParamGrad;
  a.grad_of = p;
  const ValueId acc = g.add_value(a);
  g.value(p).grad = acc;
  const ValueId micro = g.input("w.grad_micro", {n});
  Attrs at;
  at.set("param", std::string("w"));
  g.add_node("grad_accumulate", {acc, micro}, std::move(at), "w", Phase::Backward);
  Executor cpu(g, config(Backend::Cpu)), ref(g, config(Backend::Reference));
  EXPECT_EQ(std::string(cpu.kernel_name(0)), "cpu.grad_accumulate.f32");
  for (Executor* e : {&cpu, &ref}) e->init_params(1);
  kernels::StepContext ctx;
  std::vector<double> exact(static_cast<size_t>(n), 0.0);
  for (int64_t m = 0; m < 3; ++m) {
    const std::vector<float> gm = values(static_cast<size_t>(n), 60 + m, 1.0f);
    for (size_t i = 0; i < gm.size(); ++i) exact[i] += gm[i];
    ctx.micro = m;
    for (Executor* e : {&cpu, &ref}) {
      e->feed(micro, gm.data(), gm.size() * sizeof(float));
      e->run(ctx);
    }
    ASSERT_EQ(std::memcmp(cpu.data(acc), ref.data(acc), static_cast<size_t>(n) * sizeof(float)), 0)
        << "after micro-batch " << m;
  }
  // Two f32 additions (micro-batches 1 and 2), each rounding by at most
  // 2^-24 of a result below 3 in magnitude: within 6 * 2^-24.
  for (int64_t i = 0; i < n; ++i)
    ASSERT_NEAR(cpu.ptr<float>(acc)[i], exact[static_cast<size_t>(i)], 6.0 * std::ldexp(1.0, -24));
}

namespace {

// gpt-tiny's step graph (tied head: the table is the embedding's and the
// output projection's) with 2 micro-batches per step, over a vocabulary of
// 50000: a table of 50000 x 32 f32 is 6.1 MiB, more than the kernel's
// panel of product rows (4 MiB) and than any activation of a batch of 1 x 8.
constexpr int64_t kVocab = 50000;

std::unique_ptr<train::StepGraph> gpt_tiny(DType accumulated) {
  train::StepSpec spec;
  spec.model = "gpt-tiny";
  spec.batch = 1;
  spec.data = {{"tokens", DType::i32, {8}, 0.0, kVocab}, {"targets", DType::i32, {8}, -1.0, kVocab}};
  spec.classes = kVocab;
  spec.accumulation = 2;
  spec.accumulated_grads = accumulated;
  spec.optimizer.kind = "adamw";
  return train::build_step_graph(spec);
}

}  // namespace

// bf16: the table's product and rows fused, no f32 value of the table's
// shape; the transient arena smaller than f32 accumulation's by the table
// less one panel of the product. f32 accumulation keeps grad_accumulate.
TEST(FusedAccumulation, TiedTableIsNeverHeldInF32) {
  size_t arena[2] = {0, 0};
  for (DType acc : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(dtype_name(acc));
    auto sg = gpt_tiny(acc);
    const Graph& g = sg->g;
    ValueId table = kNone;
    for (const Node& n : g.nodes())
      if (n.op == "embedding" && g.value(n.inputs[1]).shape[0] == kVocab) table = n.inputs[1];
    ASSERT_NE(table, kNone);
    const std::string name = g.value(table).name;
    int product = -1, rows = -1, plain = -1;
    for (size_t k = 0; k < g.num_nodes(); ++k) {
      const Node& n = g.node(static_cast<NodeId>(k));
      if (!n.attrs.has("param") || n.attrs.s("param") != name) continue;
      if (n.op == "grad_accumulate_matmul") product = static_cast<int>(k);
      if (n.op == "grad_accumulate_rows") {
        rows = static_cast<int>(k);
        EXPECT_EQ(n.attrs.i("first"), 0) << "the rows add to the product's sum";
        EXPECT_EQ(n.attrs.i("part"), 1);
      }
      if (n.op == "grad_accumulate") plain = static_cast<int>(k);
    }
    Executor ex(g, config(Backend::Cpu));
    bool f32_table = false;
    for (size_t v = 0; v < g.num_values(); ++v) {
      const Value& val = g.value(static_cast<ValueId>(v));
      f32_table = f32_table || (val.cls == VClass::Transient && val.dtype == DType::f32 &&
                                val.shape == g.value(table).shape && ex.plan().values[v].bytes > 0);
    }
    arena[acc == DType::bf16 ? 0 : 1] = ex.plan().arena_bytes[static_cast<size_t>(Arena::Transient)];
    if (acc == DType::bf16) {
      EXPECT_GE(product, 0);
      EXPECT_GT(rows, product) << "the head's product is made first in backward, the embedding's rows last";
      EXPECT_EQ(plain, -1);
      EXPECT_FALSE(f32_table) << "an f32 transient of the table's shape remains";
    } else {
      EXPECT_EQ(product, -1);
      EXPECT_EQ(rows, -1);
      EXPECT_GE(plain, 0);
      EXPECT_TRUE(f32_table) << "f32 accumulation holds the table's micro-batch gradient";
    }
  }
  const size_t table_bytes = static_cast<size_t>(kVocab) * 32 * 4, panel = size_t(4) << 20;
  std::printf("transient arena: bf16 accumulation %zu B, f32 %zu B (table %zu B)\n", arena[0], arena[1], table_bytes);
  EXPECT_LE(arena[0] + table_bytes - panel, arena[1]);
}
