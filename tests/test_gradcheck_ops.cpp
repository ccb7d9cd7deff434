// Gradient checks for conv, pooling, batch norm, dropout, concat/slice,
// matmul and softmax cross-entropy (see gradcheck.hpp for the method and the
// tolerance). Shapes are small and odd on purpose: every kernel loop bound
// (stride, padding, dilation, groups, transposes) gets exercised.
#include <algorithm>
#include <numeric>

#include "gradcheck.hpp"

using namespace memfit;
using memfit::testing::grad_check;
using memfit::testing::GradCheckOptions;
using memfit::testing::GradInput;

namespace {

using Ins = std::vector<ValueId>;

GradInput f32(Shape s) {
  GradInput g;
  g.shape = std::move(s);
  return g;
}

// A non-differentiable f32 input with given values (running statistics).
GradInput constant(Shape s, std::vector<double> v) {
  GradInput g = f32(std::move(s));
  g.differentiable = false;
  g.values = std::move(v);
  return g;
}

GradInput labels(int64_t n, int64_t classes) {
  GradInput g;
  g.shape = {n};
  g.dtype = DType::i32;
  g.differentiable = false;
  g.int_range = classes;
  return g;
}

// Distinct values spread over [-1, 1] in a shuffled order: a max-pool window
// never holds a tie, and neighbours differ by 2/n >> the finite-difference step.
GradInput distinct(Shape s, uint64_t seed = 3) {
  GradInput g = f32(std::move(s));
  const int64_t n = numel(g.shape);
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(seed));
  for (int64_t i : perm) g.values.push_back(-1.0 + 2.0 * (static_cast<double>(i) + 0.5) / static_cast<double>(n));
  return g;
}

// A conv2d node over inputs x, w (and b) with per-axis attributes.
ValueId conv_node(Builder& b, const Ins& in, Shape stride, Shape pad, Shape dil, int64_t groups) {
  return b.g.add1("conv2d", in, {{"stride", stride}, {"pad", pad}, {"dilation", dil}, {"groups", groups}}, "conv");
}

ValueId pool_node(Builder& b, const std::string& op, ValueId x, Shape k, Shape stride, Shape pad,
                  bool count_include_pad = true) {
  Attrs a{{"kernel", k}, {"stride", stride}, {"pad", pad}};
  if (op == "avg_pool2d") a.set("count_include_pad", int64_t(count_include_pad));
  return b.g.add_node(op, {x}, a, "pool")[0];
}

}  // namespace

// ---------------------------------------------------------------- conv ----

TEST(GradCheckConv, OddSizesWithBias) {
  grad_check({f32({2, 3, 7, 5})}, [](Builder& b, const Ins& in) { return conv2d(b, in[0], 4, 3); });
}

TEST(GradCheckConv, Stride2Pad1) {
  grad_check({f32({2, 3, 9, 8})},
             [](Builder& b, const Ins& in) { return conv2d(b, in[0], 4, 3, {.stride = 2, .pad = 1}); });
}

TEST(GradCheckConv, Dilation2) {
  grad_check({f32({1, 2, 9, 9})},
             [](Builder& b, const Ins& in) { return conv2d(b, in[0], 3, 3, {.pad = 2, .dilation = 2}); });
}

TEST(GradCheckConv, Groups2) {
  grad_check({f32({2, 4, 6, 6})},
             [](Builder& b, const Ins& in) { return conv2d(b, in[0], 6, 3, {.pad = 1, .groups = 2}); });
}

TEST(GradCheckConv, DepthwiseNoBias) {
  grad_check({f32({2, 3, 6, 5})}, [](Builder& b, const Ins& in) {
    return conv2d(b, in[0], 3, 3, {.stride = 2, .pad = 1, .groups = 3, .bias = false});
  });
}

TEST(GradCheckConv, DepthwiseMultiplier2) {
  // groups = C with two output channels per input channel.
  grad_check({f32({2, 3, 5, 5})},
             [](Builder& b, const Ins& in) { return conv2d(b, in[0], 6, 3, {.pad = 1, .groups = 3}); });
}

TEST(GradCheckConv, OneByOneNoBias) {
  grad_check({f32({2, 5, 4, 3})}, [](Builder& b, const Ins& in) { return conv2d(b, in[0], 3, 1, {.bias = false}); });
}

TEST(GradCheckConv, AsymmetricEverything) {
  // Rectangular kernel, per-axis stride, padding and dilation, groups 2; the
  // weight and bias are data inputs so their gradients come through `wrt`.
  grad_check({f32({2, 4, 7, 6}), f32({4, 2, 2, 3}), f32({4})}, [](Builder& b, const Ins& in) {
    return conv_node(b, in, {2, 1}, {1, 2}, {1, 2}, 2);
  });
}

// ---------------------------------------------------------------- pool ----

TEST(GradCheckPool, MaxOverlappingWindowsPadded) {
  // stride < window: one input can win in several windows.
  grad_check({distinct({2, 3, 7, 7})}, [](Builder& b, const Ins& in) {
    return max_pool2d(b, in[0], 3, {.stride = 2, .pad = 1});
  });
}

TEST(GradCheckPool, MaxStride1) {
  grad_check({distinct({1, 2, 5, 6}, 11)}, [](Builder& b, const Ins& in) {
    return max_pool2d(b, in[0], 2, {.stride = 1});
  });
}

TEST(GradCheckPool, MaxAsymmetric) {
  grad_check({distinct({2, 2, 6, 7}, 5)}, [](Builder& b, const Ins& in) {
    return pool_node(b, "max_pool2d", in[0], {2, 3}, {1, 2}, {1, 1});
  });
}

TEST(GradCheckPool, MaxCeilMode) {
  // The last window of each axis is partial: 8 rows give 3 outputs
  // rounded down and 4 up; 10 columns padded by 1 give 5 and 6.
  grad_check({distinct({2, 2, 8, 10}, 13)}, [](Builder& b, const Ins& in) {
    Attrs a{{"kernel", Shape{3, 3}}, {"stride", Shape{2, 2}}, {"pad", Shape{0, 1}}, {"ceil", int64_t(1)}};
    return b.g.add_node("max_pool2d", {in[0]}, a, "pool")[0];
  });
}

TEST(GradCheckPool, MaxAfterRelu) {
  // Relu output has ties at 0; margin keeps the input off the kink and the
  // distinct values keep the positive part tie-free.
  GradCheckOptions o;
  o.margin = 1e-3;
  grad_check({distinct({2, 2, 6, 6}, 9)}, [](Builder& b, const Ins& in) {
    return max_pool2d(b, relu(b, in[0]), 2);
  }, o);
}

TEST(GradCheckPool, AvgIncludePad) {
  grad_check({f32({2, 3, 7, 6})}, [](Builder& b, const Ins& in) {
    return avg_pool2d(b, in[0], 3, {.stride = 2, .pad = 1, .count_include_pad = true});
  });
}

TEST(GradCheckPool, AvgExcludePad) {
  grad_check({f32({2, 3, 7, 6})}, [](Builder& b, const Ins& in) {
    return avg_pool2d(b, in[0], 3, {.stride = 2, .pad = 1, .count_include_pad = false});
  });
}

TEST(GradCheckPool, AvgAsymmetricExcludePad) {
  grad_check({f32({1, 2, 5, 7})}, [](Builder& b, const Ins& in) {
    return pool_node(b, "avg_pool2d", in[0], {3, 2}, {1, 2}, {1, 1}, false);
  });
}

TEST(GradCheckPool, GlobalAvg) {
  grad_check({f32({3, 4, 5, 3})}, [](Builder& b, const Ins& in) { return global_avg_pool(b, in[0]); });
}

// ----------------------------------------------------------- batch norm ----

TEST(GradCheckBatchNorm, TrainingRank4Params) {
  // Through the builder: gamma and beta are trainable parameters (1 and 0).
  grad_check({f32({3, 4, 3, 2})}, [](Builder& b, const Ins& in) { return batch_norm(b, in[0]); });
}

TEST(GradCheckBatchNorm, TrainingRank4RandomAffine) {
  grad_check({f32({2, 3, 4, 3}), f32({3}), f32({3}), constant({3}, {0.1, -0.2, 0.3}), constant({3}, {1.0, 0.5, 2.0})},
             [](Builder& b, const Ins& in) {
               return b.g.add_node("batch_norm", in, {{"eps", 1e-5}, {"momentum", 0.1}, {"training", int64_t(1)}},
                                   "bn")[0];
             });
}

TEST(GradCheckBatchNorm, TrainingRank2) {
  grad_check({f32({6, 5}), f32({5}), f32({5}), constant({5}, {0, 0, 0, 0, 0}), constant({5}, {1, 1, 1, 1, 1})},
             [](Builder& b, const Ins& in) {
               return b.g.add_node("batch_norm", in, {{"eps", 1e-3}, {"momentum", 0.3}, {"training", int64_t(1)}},
                                   "bn")[0];
             });
}

TEST(GradCheckBatchNorm, Eval) {
  // Eval mode: fixed running statistics, so x's gradient is a per-channel scale.
  grad_check({f32({2, 3, 3, 4}), f32({3}), f32({3}), constant({3}, {0.2, -0.5, 0.0}), constant({3}, {0.7, 1.5, 3.0})},
             [](Builder& b, const Ins& in) {
               return b.g.add_node("batch_norm", in, {{"eps", 1e-5}, {"momentum", 0.1}, {"training", int64_t(0)}},
                                   "bn")[0];
             });
}

TEST(GradCheckBatchNorm, EvalRank2) {
  grad_check({f32({4, 3}), f32({3}), f32({3}), constant({3}, {0.5, 0.0, -1.0}), constant({3}, {0.25, 1.0, 4.0})},
             [](Builder& b, const Ins& in) {
               return b.g.add_node("batch_norm", in, {{"eps", 1e-5}, {"momentum", 0.1}, {"training", int64_t(0)}},
                                   "bn")[0];
             });
}

// -------------------------------------------------------------- dropout ----

TEST(GradCheckDropout, P03) {
  grad_check({f32({4, 50})}, [](Builder& b, const Ins& in) { return dropout(b, in[0], 0.3); });
}

TEST(GradCheckDropout, InPlaceAfterScale) {
  // The scale output dies at the dropout, so dropout runs in place over it.
  grad_check({f32({3, 7, 5})}, [](Builder& b, const Ins& in) {
    ValueId s = b.g.add1("scale", {in[0]}, {{"alpha", 1.5}}, "scale");
    return dropout(b, s, 0.3);
  });
}

// --------------------------------------------------------- concat/slice ----

TEST(GradCheckShape, ConcatAxis1) {
  grad_check({f32({2, 3, 4}), f32({2, 1, 4}), f32({2, 2, 4})},
             [](Builder& b, const Ins& in) { return concat(b, {in[0], in[1], in[2]}, 1); });
}

TEST(GradCheckShape, ConcatLastAxisNegative) {
  grad_check({f32({2, 3, 2}), f32({2, 3, 5})}, [](Builder& b, const Ins& in) { return concat(b, {in[0], in[1]}, -1); });
}

TEST(GradCheckShape, ConcatChannelsOfConvs) {
  // The same input twice and two branches: gradients from slices add up.
  grad_check({f32({2, 2, 4, 4})}, [](Builder& b, const Ins& in) {
    ValueId a = conv2d(b, in[0], 3, 1, {.name = "a"});
    ValueId c = conv2d(b, in[0], 2, 3, {.pad = 1, .name = "c"});
    return concat(b, {a, in[0], c, in[0]}, 1);
  });
}

TEST(GradCheckShape, SliceMiddleOfAnAxis) {
  grad_check({f32({2, 5, 3})}, [](Builder& b, const Ins& in) { return slice(b, in[0], 1, 1, 3); });
}

TEST(GradCheckShape, SlicesOfOneValueAsAQkvSplit) {
  // One projection split three ways along the last axis, the parts combined
  // again: every part's gradient reaches the shared input.
  grad_check({f32({2, 3, 6})}, [](Builder& b, const Ins& in) {
    ValueId q = slice(b, in[0], -1, 0, 2), k = slice(b, in[0], -1, 2, 2), v = slice(b, in[0], -1, 4, 2);
    ValueId qk = b.g.add1("add", {q, k}, {}, "qk");
    return concat(b, {qk, v, q}, 1);
  });
}

// --------------------------------------------------------------- matmul ----

TEST(GradCheckMatmul, AllTransposes2d) {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      SCOPED_TRACE("trans_a=" + std::to_string(ta) + " trans_b=" + std::to_string(tb));
      Shape a = ta ? Shape{4, 3} : Shape{3, 4};  // M = 3, K = 4
      Shape c = tb ? Shape{5, 4} : Shape{4, 5};  // N = 5
      grad_check({f32(a), f32(c)}, [=](Builder& b, const Ins& in) { return matmul(b, in[0], in[1], ta, tb); });
    }
}

TEST(GradCheckMatmul, AllTransposesBatched) {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      SCOPED_TRACE("trans_a=" + std::to_string(ta) + " trans_b=" + std::to_string(tb));
      Shape a = ta ? Shape{2, 3, 4, 3} : Shape{2, 3, 3, 4};
      Shape c = tb ? Shape{2, 3, 5, 4} : Shape{2, 3, 4, 5};
      grad_check({f32(a), f32(c)}, [=](Builder& b, const Ins& in) { return matmul(b, in[0], in[1], ta, tb); });
    }
}

TEST(GradCheckMatmul, BroadcastSecondOperand) {
  // b has no batch axes and is shared by every batch; b is a constant here,
  // so only a's gradient flows (a shared operand's own gradient, a sum over
  // the batch, is checked in test_ops_embed.cpp).
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      SCOPED_TRACE("trans_a=" + std::to_string(ta) + " trans_b=" + std::to_string(tb));
      Shape a = ta ? Shape{3, 4, 2} : Shape{3, 2, 4};
      GradInput c = f32(tb ? Shape{5, 4} : Shape{4, 5});
      c.differentiable = false;
      grad_check({f32(a), c}, [=](Builder& b, const Ins& in) { return matmul(b, in[0], in[1], ta, tb); });
    }
}

TEST(GradCheckMatmul, BroadcastFirstOperand) {
  // a has no batch axes and is a constant; only b's gradient flows.
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      SCOPED_TRACE("trans_a=" + std::to_string(ta) + " trans_b=" + std::to_string(tb));
      GradInput a = f32(ta ? Shape{4, 2} : Shape{2, 4});
      a.differentiable = false;
      Shape c = tb ? Shape{3, 5, 4} : Shape{3, 4, 5};
      grad_check({a, f32(c)}, [=](Builder& b, const Ins& in) { return matmul(b, in[0], in[1], ta, tb); });
    }
}

TEST(GradCheckMatmul, BroadcastThenLinear) {
  // x[B, M, K] times a shared constant matrix, then a linear layer, so a
  // parameter gradient flows through matmul's a-gradient as well.
  grad_check({f32({2, 3, 4}), constant({4, 5}, std::vector<double>(20, 0.3))}, [](Builder& b, const Ins& in) {
    return linear(b, matmul(b, in[0], in[1]), 2);
  });
}

// -------------------------------------------------------- softmax xent ----

TEST(GradCheckXent, Plain) {
  grad_check({f32({5, 7}), labels(5, 7)}, [](Builder& b, const Ins& in) { return softmax_xent(b, in[0], in[1]); });
}

TEST(GradCheckXent, LabelSmoothing) {
  grad_check({f32({6, 4}), labels(6, 4)},
             [](Builder& b, const Ins& in) { return softmax_xent(b, in[0], in[1], 0.1); });
}

TEST(GradCheckXent, LargeLogitsAfterLinear) {
  // Logits scaled to ~±20: the max subtraction must keep exp finite and the
  // gradient exact; the linear layer's parameters get gradients too.
  grad_check({f32({4, 6}), labels(4, 5)}, [](Builder& b, const Ins& in) {
    ValueId z = b.g.add1("scale", {linear(b, in[0], 5)}, {{"alpha", 20.0}}, "scale");
    return softmax_xent(b, z, in[1], 0.2);
  });
}

// ------------------------------------------------------------ composite ----

TEST(GradCheckComposite, ConvBnPoolHead) {
  GradCheckOptions o;
  o.max_checks_per_tensor = 20;
  grad_check({distinct({2, 2, 6, 6}, 17), labels(2, 3)}, [](Builder& b, const Ins& in) {
    ValueId x = conv2d(b, in[0], 3, 3, {.pad = 1, .bias = false, .name = "conv"});
    x = batch_norm(b, x, {.name = "bn"});
    x = avg_pool2d(b, x, 2);
    x = global_avg_pool(b, x);
    x = linear(b, x, 3);
    return softmax_xent(b, x, in[1]);
  }, o);
}
