// The embedding, gather_rows, permute and broadcast-matmul-gradient ops at the graph level:
// gradient checks in double (gradcheck.hpp: method and tolerance), shape
// errors that name the layer, and the defined behaviour for out-of-range ids
// on every backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "error_of.hpp"
#include "gradcheck.hpp"
#include "graph_run.hpp"

using namespace memfit;
using memfit::testing::error_of;
using memfit::testing::grad_check;
using memfit::testing::GradInput;

namespace {

using memfit::testing::f32_input;
using memfit::testing::Ins;

// i32 ids with the given values, or drawn from [0, vocab) when none are given.
GradInput ids(Shape s, int64_t vocab, std::vector<double> values = {}) {
  return {.shape = std::move(s), .dtype = DType::i32, .differentiable = false, .values = std::move(values), .int_range = vocab};
}

ValueId table_of(Builder& b, const std::string& name = "embed") { return b.g.find(name + ".weight"); }

}  // namespace

// ----------------------------------------------------------- embedding ----

TEST(GradCheckEmbedding, RepeatedIdsRank1) {
  // Row 2 three times, row 0 twice, rows 3 and 4 never: the table's gradient
  // sums repeated rows and is 0 (written, not left poisoned) for unused ones.
  grad_check({ids({7}, 6, {2, 0, 2, 5, 2, 0, 1})}, [](Builder& b, const Ins& in) { return embedding(b, in[0], 6, 3); });
}

TEST(GradCheckEmbedding, Rank2IdsThenLinear) {
  // 12 ids over 5 rows repeat; a linear layer after the gather makes dy a
  // non-trivial function of the table.
  grad_check({ids({3, 4}, 5)}, [](Builder& b, const Ins& in) { return linear(b, embedding(b, in[0], 5, 4), 3); });
}

TEST(GradCheckEmbedding, TiedWithMatmulHead) {
  // GPT-2's weight tying: one table [V, D] embeds the ids and, transposed,
  // is the LM head (logits = x table^T, the table broadcast over the batch).
  // Its gradient is the sum of embedding_bwd's and the head's; the check
  // fails if either is missing or wrong.
  grad_check({ids({2, 3}, 7, {1, 4, 1, 6, 0, 1}), ids({6}, 7)}, [](Builder& b, const Ins& in) {
    ValueId h = embedding(b, in[0], 7, 4);
    ValueId x = linear(b, h, 4, {.name = "mix"});
    ValueId logits = matmul(b, x, table_of(b), false, true);  // [2, 3, 7]
    return softmax_xent(b, reshape(b, logits, {6, 7}), in[1]);
  });
}

TEST(GradCheckEmbedding, TiedWithLinearHead) {
  // The same tying with a linear head (its weight [V, D] is the table).
  grad_check({ids({5}, 6, {3, 3, 0, 5, 3})}, [](Builder& b, const Ins& in) {
    ValueId h = embedding(b, in[0], 6, 3);
    return b.g.add1("linear", {h, table_of(b)}, {}, "head");  // quadratic in the table
  });
}

TEST(Embedding, TiedTableGradientIsOneSum) {
  // Autodiff sums the two uses' contributions into the table's one gradient:
  // the embedding's backward, last in backward, adds its rows into the
  // head's contribution (its acc input) instead of into a zeroed table of
  // its own for an add.
  Graph g;
  Builder b(g);
  ValueId in = g.input("ids", {4}, DType::i32);
  ValueId h = embedding(b, in, 5, 3);
  ValueId y = matmul(b, h, table_of(b), false, true);
  ValueId loss = reshape(b, linear(b, reshape(b, y, {1, 20}), 1, {.name = "obj"}), {1});
  build_backward(g, loss);
  const ValueId grad = g.value(table_of(b)).grad;
  ASSERT_NE(grad, kNone);
  const Node& sum = g.node(g.value(grad).producer);
  ASSERT_EQ(sum.op, "embedding_bwd");
  ASSERT_EQ(sum.inputs.size(), 3u);
  ValueId p = sum.inputs[2];
  while (g.node(g.value(p).producer).op == "reshape" || g.node(g.value(p).producer).op == "cast")
    p = g.node(g.value(p).producer).inputs[0];
  EXPECT_EQ(g.node(g.value(p).producer).op, "matmul");
  EXPECT_LT(g.value(sum.inputs[2]).producer, g.value(grad).producer);
  int adds = 0;
  for (const Node& n : g.nodes()) adds += n.op == "add";
  EXPECT_EQ(adds, 0);
}

TEST(Embedding, ShapeErrorsNameTheLayer) {
  Graph g;
  Builder b(g);
  ValueId fids = g.input("fids", {4});
  EXPECT_NE(error_of([&] { embedding(b, fids, 5, 3, {.name = "wte"}); }).find("layer 'wte' (embedding): ids must be an i32"),
            std::string::npos);
  ValueId good = g.input("ids", {4}, DType::i32);
  EXPECT_NE(error_of([&] { embedding(b, good, 0, 3, {.name = "wpe"}); }).find("layer 'wpe' (embedding): needs vocab >= 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { embedding(b, good, 5, 3, {.name = "h", .dtype = DType::f16}); })
                .find("stored as f32 or bf16, not f16"),
            std::string::npos);
  ValueId t1 = g.input("t1", {5});
  EXPECT_NE(error_of([&] { g.add1("embedding", {good, t1}, {}, "e1"); }).find("layer 'e1' (embedding): the table must be"),
            std::string::npos);
  ValueId dy = g.input("dy", {3, 2});
  EXPECT_NE(error_of([&] { g.add1("embedding_bwd", {good, dy}, {{"vocab", int64_t(5)}}, "e2"); })
                .find("layer 'e2' (embedding_bwd)"),
            std::string::npos);
}

TEST(Embedding, Bf16OutputAndBuilderNames) {
  Graph g;
  Builder b(g);
  ValueId in = g.input("ids", {2, 3}, DType::i32);
  ValueId y;
  {
    auto sc = b.scope("transformer");
    y = embedding(b, in, 11, 8, {.name = "wte", .dtype = DType::bf16, .init_std = 0.02});
  }
  EXPECT_EQ(g.value(y).shape, (Shape{2, 3, 8}));
  EXPECT_EQ(g.value(y).dtype, DType::bf16);
  const ValueId t = g.find("transformer.wte.weight");
  ASSERT_NE(t, kNone);
  EXPECT_EQ(g.value(t).shape, (Shape{11, 8}));
  EXPECT_EQ(g.value(t).dtype, DType::f32);
  EXPECT_NEAR(g.value(t).init.bound, std::sqrt(3.0) * 0.02, 1e-15);
  EXPECT_EQ(g.node(g.value(y).producer).layer, "transformer.wte");
}

// Out-of-range ids (negative, = V, far beyond): the forward row is NaN, the
// backward drops the row, nothing outside the table or the planned buffers
// is touched (guard bytes), on every backend and for both output types.
TEST(Embedding, OutOfRangeIdsGiveNaNRowsAndAreDroppedBackward) {
  const int64_t V = 4, D = 19;  // D: a full 16-lane group and a tail
  const std::vector<int32_t> id_values{0, -1, 3, 4, 2, 1000000, 3, -2147483647 - 1};
  const int64_t n = static_cast<int64_t>(id_values.size());
  for (DType out : {DType::f32, DType::bf16})
    for (Backend be : {Backend::Cpu, Backend::Reference, Backend::Reference64}) {
      if (out == DType::bf16 && be == Backend::Reference64) continue;  // stores every float as double
      SCOPED_TRACE(std::string(backend_name(be)) + " " + dtype_name(out));
      Graph g;
      ValueId in = g.input("ids", {n}, DType::i32);
      ValueId table = g.input("table", {V, D});
      ValueId dy = g.input("dy", {n, D});
      ValueId y = g.add1("embedding", {in, table}, {{"dtype", int64_t(out)}}, "embed");
      ValueId dt = g.add1("embedding_bwd", {in, dy}, {{"vocab", V}}, "embed");
      g.value(y).is_output = g.value(dt).is_output = true;
      memfit::testing::GraphData data;
      data.ints[in] = id_values;
      // Table and dy hold small integers and halves: exact in bf16, and
      // every sum below is exact in f32, so the comparisons are exact.
      for (int64_t i = 0; i < V * D; ++i) data.floats[table].push_back(static_cast<float>(i % 13) * 0.5f - 3.0f);
      for (int64_t i = 0; i < n * D; ++i) data.floats[dy].push_back(static_cast<float>(i % 7) - 3.0f);
      memfit::testing::Values got = memfit::testing::run_graph(g, be, data, {y, dt});
      std::vector<float> want_dt(static_cast<size_t>(V * D), 0.0f);
      for (int64_t i = 0; i < n; ++i) {
        const int32_t id = id_values[static_cast<size_t>(i)];
        const bool valid = id >= 0 && id < V;
        for (int64_t d = 0; d < D; ++d) {
          const float v = got[y][static_cast<size_t>(i * D + d)];
          if (valid) EXPECT_EQ(v, data.floats[table][static_cast<size_t>(id * D + d)]) << "row " << i;
          else EXPECT_TRUE(std::isnan(v)) << "row " << i << " (id " << id << ") col " << d << ": " << v;
          if (valid) want_dt[static_cast<size_t>(id * D + d)] += data.floats[dy][static_cast<size_t>(i * D + d)];
        }
      }
      EXPECT_EQ(got[dt], want_dt);
    }
}

// -------------------------------------------------------------- permute ----

// gather_rows: a relative position bias table [5, 2, 3] read at constant
// rows, row 3 three times and row 1 never (its gradient is written 0), then
// a linear so that dy varies by row.
TEST(GradCheckGatherRows, RepeatedAndUnreadRowsThenLinear) {
  grad_check({f32_input({5, 2, 3})}, [](Builder& b, const Ins& in) {
    return linear(b, reshape(b, gather_rows(b, in[0], {3, 0, 3, 4, 2, 3}), {6, 6}), 2);
  });
}

// Its CPU backend runs the reference kernels: the rows copied, the gradient
// summed; a row outside the table is refused when the node is added.
TEST(GatherRows, RunsOnTheCpuBackendAndChecksItsRows) {
  Graph g;
  Builder b(g);
  const ValueId t = g.input("t", {4, 3});
  const ValueId y = gather_rows(b, t, {2, 2, 0});
  const ValueId d = g.add1("gather_rows_bwd", {y}, {{"rows", Shape{2, 2, 0}}, {"shape", Shape{4, 3}}}, "bwd");
  g.value(y).is_output = true;
  g.value(d).is_output = true;
  memfit::testing::GraphData data;
  std::vector<float> tv(12);
  std::iota(tv.begin(), tv.end(), 1.0f);
  data.floats[t] = tv;
  const auto cpu = memfit::testing::run_graph(g, Backend::Cpu, data, {y, d});
  EXPECT_EQ(cpu.at(y), (std::vector<float>{7, 8, 9, 7, 8, 9, 1, 2, 3}));
  EXPECT_EQ(cpu.at(d), (std::vector<float>{1, 2, 3, 0, 0, 0, 14, 16, 18, 0, 0, 0}));
  EXPECT_NE(error_of([&] { gather_rows(b, t, {1, 4}); }).find("row 4 is outside the table [4, 3]"), std::string::npos);
}

TEST(GradCheckPermute, EveryPermutationOfRank3) {
  std::vector<int64_t> perm{0, 1, 2};
  do {
    SCOPED_TRACE(shape_str(perm));
    grad_check({f32_input({2, 3, 4})}, [=](Builder& b, const Ins& in) { return permute(b, in[0], perm); });
  } while (std::next_permutation(perm.begin(), perm.end()));
}

TEST(GradCheckPermute, Rank4And5) {
  const std::vector<std::vector<int64_t>> perms{{0, 2, 1, 3}, {3, 1, 0, 2}, {1, 0, 3, 2}, {0, 1, 3, 2}};
  for (const auto& perm : perms) {
    SCOPED_TRACE(shape_str(perm));
    grad_check({f32_input({2, 3, 1, 4})}, [=](Builder& b, const Ins& in) { return permute(b, in[0], perm); });
  }
  grad_check({f32_input({2, 1, 3, 2, 3})}, [](Builder& b, const Ins& in) { return permute(b, in[0], {4, -3, 0, 3, 1}); });
}

TEST(GradCheckPermute, AttentionHeadsThroughMatmul) {
  // [B, T, H, Dh] -> [B, H, T, Dh], scores q k^T per head: the permute's
  // gradient feeds a batched matmul's.
  grad_check({f32_input({2, 3, 2, 4}), f32_input({2, 3, 2, 4})}, [](Builder& b, const Ins& in) {
    ValueId q = permute(b, in[0], {0, 2, 1, 3});
    ValueId k = transpose(b, in[1], 1, 2);
    return matmul(b, q, k, false, true);
  });
}

TEST(Permute, TransposeAndErrors) {
  Graph g;
  Builder b(g);
  ValueId x = g.input("x", {2, 3, 5});
  ValueId t = transpose(b, x, -1, 0);
  EXPECT_EQ(g.value(t).shape, (Shape{5, 3, 2}));
  EXPECT_EQ(g.node(g.value(t).producer).attrs.ints("perm"), (std::vector<int64_t>{2, 1, 0}));
  EXPECT_NE(error_of([&] { transpose(b, x, 0, 3); }).find("cannot swap axes 0 and 3 of [2, 3, 5]"), std::string::npos);
  const std::string dup = error_of([&] { permute(b, x, {0, 0, 1}); });
  EXPECT_NE(dup.find("(permute): perm [0, 0, 1] is not a permutation of the 3 axes of [2, 3, 5]"), std::string::npos) << dup;
  EXPECT_NE(error_of([&] { permute(b, x, {1, 0}); }).find("is not a permutation"), std::string::npos);
  EXPECT_NE(error_of([&] { permute(b, x, {0, 1, 7}); }).find("is not a permutation"), std::string::npos);
}

// ------------------------------------------------- broadcast matmul -------

// A shared operand (no batch axes) gets the sum over the batch of its
// per-batch gradients; every transposition, on either side, one or two batch
// axes, with both operands' gradients checked.
TEST(GradCheckMatmulBroadcast, SecondOperandShared) {
  for (const Shape& batch : {Shape{3}, Shape{2, 3}})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        SCOPED_TRACE(shape_str(batch) + " trans_a=" + std::to_string(ta) + " trans_b=" + std::to_string(tb));
        Shape a = batch;
        for (int64_t d : ta ? Shape{4, 2} : Shape{2, 4}) a.push_back(d);  // M = 2, K = 4
        const Shape c = tb ? Shape{5, 4} : Shape{4, 5};                    // N = 5
        grad_check({f32_input(a), f32_input(c)}, [=](Builder& b, const Ins& in) { return matmul(b, in[0], in[1], ta, tb); });
      }
}

TEST(GradCheckMatmulBroadcast, FirstOperandShared) {
  for (const Shape& batch : {Shape{3}, Shape{2, 3}})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        SCOPED_TRACE(shape_str(batch) + " trans_a=" + std::to_string(ta) + " trans_b=" + std::to_string(tb));
        const Shape a = ta ? Shape{4, 2} : Shape{2, 4};
        Shape c = batch;
        for (int64_t d : tb ? Shape{5, 4} : Shape{4, 5}) c.push_back(d);
        grad_check({f32_input(a), f32_input(c)}, [=](Builder& b, const Ins& in) { return matmul(b, in[0], in[1], ta, tb); });
      }
}

TEST(GradCheckMatmulBroadcast, SharedWeightIsAParameterUsedTwice) {
  // x W and then (x W) W^T with one trainable W [4, 4]: two broadcast uses,
  // one transposed, summed into W's gradient.
  grad_check({f32_input({2, 3, 4})}, [](Builder& b, const Ins& in) {
    ValueId w = b.g.param("w", {4, 4});
    b.g.value(w).init = {InitSpec::Uniform, 0.5};
    ValueId h = matmul(b, in[0], w);
    return matmul(b, h, w, false, true);
  });
}

TEST(MatmulBroadcast, GradientOfTheSharedOperandIsOne2dProduct) {
  // x[B, T, D] times a shared W[D, N]: dW is one [D, B*T] x [B*T, N] product
  // over free views, without a permuted copy.
  Graph g;
  Builder b(g);
  ValueId x = g.input("x", {2, 3, 4});
  ValueId w = g.param("w", {4, 5});
  ValueId y = matmul(b, x, w);
  build_backward(g, reshape(b, linear(b, reshape(b, y, {1, 30}), 1, {.name = "obj"}), {1}));
  const Node& dw = g.node(g.value(g.value(w).grad).producer);
  ASSERT_EQ(dw.op, "matmul");
  EXPECT_EQ(g.value(dw.inputs[0]).shape, (Shape{6, 4}));
  EXPECT_EQ(g.value(dw.inputs[1]).shape, (Shape{6, 5}));
  for (const Node& n : g.nodes()) EXPECT_NE(n.op, "permute");
}

TEST(MatmulBroadcast, TiedTableWithBf16ActivationsGetsAnF32Gradient) {
  // bf16 activations times the f32 table: the head's table gradient comes out
  // of a bf16 matmul and is cast to f32, so that it can be summed with
  // embedding_bwd's (f32) into the parameter's gradient.
  Graph g;
  Builder b(g);
  ValueId in = g.input("ids", {2, 3}, DType::i32);
  ValueId h = embedding(b, in, 5, 4, {.dtype = DType::bf16});
  ValueId logits = cast(b, matmul(b, h, table_of(b), false, true), DType::f32);
  ValueId labels = g.input("labels", {6}, DType::i32);
  ValueId loss = softmax_xent(b, reshape(b, logits, {6, 5}), labels);
  build_backward(g, loss);
  const ValueId grad = g.value(table_of(b)).grad;
  ASSERT_NE(grad, kNone);
  EXPECT_EQ(g.value(grad).dtype, DType::f32);
  for (Backend be : {Backend::Cpu, Backend::Reference}) {
    memfit::testing::GraphData data;
    data.ints[in] = {0, 4, 0, 2, 3, 0};
    data.ints[labels] = {1, 0, 4, 4, 2, 3};
    const std::vector<float> dt = memfit::testing::run_graph(g, be, data, {grad}).at(grad);
    EXPECT_TRUE(std::all_of(dt.begin(), dt.end(), [](float v) { return std::isfinite(v); })) << backend_name(be);
    EXPECT_TRUE(std::any_of(dt.begin(), dt.end(), [](float v) { return v != 0.0f; })) << backend_name(be);
  }
}
