// Compact optimizer state (--optimizer-state bf16 | 8bit) and Adafactor:
//  - the 8-bit codes: their tables, nearest rounding, the error bound of a
//    block's round trip, and the edge blocks (all zeros, one outlier, all
//    equal, a short last block);
//  - a NaN or Inf in a gradient or in the state is refused with an error
//    naming the tensor, and leaves the block it is in as it was;
//  - the fast CPU kernels against the reference kernels, and one update
//    node per parameter against one over all of them;
//  - gpt-tiny: 8-bit and bf16 AdamW track fp32 AdamW over 200 steps;
//    Adafactor learns, and each of its steps matches a double-precision
//    implementation of the published algorithm written here;
//  - the plan's optimizer-state bytes equal each format's formula.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/kernel.hpp"
#include "kernels/optim_state.hpp"
#include "memfit/optim.hpp"
#include "memfit/runtime.hpp"
#include "fit/report.hpp"
#include "compile/step_graph.hpp"
#include "gpt_tiny_markov.hpp"

using namespace memfit;
namespace q = memfit::kernels::qstate;

namespace {

// ---------------------------------------------------------------- the codes

// The error bound of kernels/optim_state.hpp for a value x of a block whose
// absmax is a: half the code's spacing, relative (2^-(M+1)) in the normal
// range, absolute below it (the unsigned code rounds a positive value up to
// its smallest code instead of to 0: one whole step); plus the f32
// roundings of scaling, the table and the scale (< 2^-21 |x|).
double code_bound(double x, double a, bool is_signed) {
  const double T = 1.875;
  const int B = is_signed ? 15 : 31, M = 3;
  const double min_normal = a * std::ldexp(1.0, 1 - B) / T;
  const double below = is_signed ? a * std::ldexp(1.0, -B - M) / T : a * std::ldexp(1.0, 1 - B - M) / T;
  const double bound = std::abs(x) >= min_normal ? std::ldexp(std::abs(x), -(M + 1)) : below;
  return bound * (1 + std::ldexp(1.0, -20)) + std::ldexp(std::abs(x), -21);
}

// One tensor of n elements and 2 moments in 8-bit state, through
// BlockStates: stores x as moment s (0 signed, 1 unsigned) and loads it back.
struct OneTensor {
  std::vector<int64_t> sizes;
  kernels::StateLayout layout;
  std::vector<float> w, g, scales;
  std::vector<uint8_t> m, v;
  std::vector<void*> in;
  explicit OneTensor(int64_t n) : sizes{n}, w(n), g(n), scales(2 * q::blocks_of(n)), m(n), v(n) {
    layout.format = kernels::StateFormat::Q8;
    layout.blockwise = {1};
    layout.names = {"t"};
    in = {w.data(), g.data(), m.data(), v.data(), scales.data()};
  }
  std::vector<float> round_trip(const std::vector<float>& x, size_t s) {
    const q::BlockStates io(layout, sizes, in, 2);
    std::vector<float> out(x.size()), zeros(q::kQuantBlock);
    for (int64_t b = 0; b < q::blocks_of(sizes[0]); ++b) {
      const int64_t begin = b * q::kQuantBlock, n = std::min(q::kQuantBlock, sizes[0] - begin);
      std::vector<float> a(x.begin() + begin, x.begin() + begin + n);
      float* st[2] = {s == 0 ? a.data() : zeros.data(), s == 1 ? a.data() : zeros.data()};
      io.store(0, b, n, st, 0);
      std::vector<float> back0(n), back1(n);
      float* ld[2] = {back0.data(), back1.data()};
      io.load(0, b, n, ld);
      std::copy(ld[s], ld[s] + n, out.begin() + begin);
    }
    return out;
  }
  float absmax(size_t s, int64_t b) const { return scales[s * q::blocks_of(sizes[0]) + b]; }
};

void expect_within_bound(const std::vector<float>& x, const std::vector<float>& back, const OneTensor& t, size_t s,
                         const std::string& what) {
  int bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double a = t.absmax(s, static_cast<int64_t>(i) / q::kQuantBlock);
    const double err = std::abs(double(x[i]) - double(back[i]));
    if (err > code_bound(x[i], a, s == 0) && ++bad <= 5)
      ADD_FAILURE() << what << ": element " << i << " " << x[i] << " came back " << back[i] << " (absmax " << a
                    << ", bound " << code_bound(x[i], a, s == 0) << ")";
  }
  EXPECT_EQ(bad, 0) << what;
}

}  // namespace

TEST(OptimState8Bit, CodeTablesAreMonotoneAndEndAtOne) {
  EXPECT_EQ(q::kSignedTable[127], 1.0f);
  EXPECT_EQ(q::kUnsignedTable[255], 1.0f);
  EXPECT_EQ(q::kSignedTable[0], 0.0f);
  EXPECT_EQ(q::kUnsignedTable[0], 0.0f);
  for (int c = 1; c < 128; ++c) {
    EXPECT_LT(q::kSignedTable[c - 1], q::kSignedTable[c]) << c;
    EXPECT_EQ(q::kSignedTable[128 + c], -q::kSignedTable[c]) << c;
  }
  for (int c = 1; c < 256; ++c) EXPECT_LT(q::kUnsignedTable[c - 1], q::kUnsignedTable[c]) << c;
  // The kernels' computed decoding is the table, bit for bit.
  for (int c = 0; c < 256; ++c) {
    EXPECT_EQ(std::bit_cast<uint32_t>(q::decode_signed(static_cast<uint8_t>(c))), std::bit_cast<uint32_t>(q::kSignedTable[c])) << c;
    EXPECT_EQ(std::bit_cast<uint32_t>(q::decode_unsigned(static_cast<uint8_t>(c))), std::bit_cast<uint32_t>(q::kUnsignedTable[c])) << c;
  }
  // Every code's own value encodes to it (absmax 1).
  for (int c = 0; c < 256; ++c) {
    if (c != 128) {
      EXPECT_EQ(q::encode_signed(q::kSignedTable[c], 1.0f), c) << c;
    }
    EXPECT_EQ(q::encode_unsigned(q::kUnsignedTable[c], 1.0f), c) << c;
  }
  // The documented ranges: smallest normal and step below it.
  EXPECT_FLOAT_EQ(q::kSignedTable[8], std::ldexp(1.0f, -14) / 1.875f);
  EXPECT_FLOAT_EQ(q::kSignedTable[1], std::ldexp(1.0f, -17) / 1.875f);
  EXPECT_FLOAT_EQ(q::kUnsignedTable[8], std::ldexp(1.0f, -30) / 1.875f);
}

TEST(OptimState8Bit, EncodingRoundsToTheNearestCode) {
  std::mt19937 gen(11);
  std::uniform_real_distribution<double> e(-40.0, 0.0), u(0.0, 1.0);
  for (int i = 0; i < 20000; ++i) {
    const float y = static_cast<float>(i % 2 ? u(gen) : std::pow(2.0, e(gen)));
    for (int sgn = 0; sgn < 2; ++sgn) {
      const auto& table = sgn == 0 ? q::kSignedTable : q::kUnsignedTable;
      const int c = sgn == 0 ? q::encode_signed(y, 1.0f) : q::encode_unsigned(y, 1.0f);
      double best = 1e30;
      for (int k = 0; k < 256; ++k) best = std::min(best, std::abs(double(table[k]) - y));
      const double got = std::abs(double(table[c]) - y);
      if (sgn == 1 && c == 1 && y < table[1]) continue;  // the unsigned code's round-up of tiny values
      // Nearest, up to the rounding of y * T in f32 (a tie may go either way).
      EXPECT_LE(got, best + std::ldexp(double(y), -22)) << "y " << y << " code " << c << (sgn ? " unsigned" : " signed");
    }
    EXPECT_EQ(q::encode_signed(-y, 1.0f), q::encode_signed(y, 1.0f) | 128) << y;
  }
  EXPECT_EQ(q::encode_unsigned(1e-30f, 1.0f), 1) << "a positive second moment is never stored as 0";
  EXPECT_EQ(q::encode_unsigned(0.0f, 1.0f), 0);
}

// Random blocks of several spreads through store and load: every element
// within the bound of its code's spacing (code_bound).
TEST(OptimState8Bit, BlockRoundTripErrorIsBoundedByTheCodesSpacing) {
  const int64_t n = 3 * q::kQuantBlock + 777;  // a short last block
  OneTensor t(n);
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::cauchy_distribution<float> heavy(0.0f, 1e-3f);
  std::uniform_real_distribution<double> decades(-12.0, 0.0);
  for (int kind = 0; kind < 3; ++kind)
    for (size_t s = 0; s < 2; ++s) {
      std::vector<float> x(static_cast<size_t>(n));
      for (float& e : x) {
        e = kind == 0 ? normal(gen) : kind == 1 ? heavy(gen) : static_cast<float>(std::pow(10.0, decades(gen)));
        if (s == 1) e = e * e;  // a second moment: squares
        else if (kind == 2 && gen() % 2) e = -e;
      }
      const std::vector<float> back = t.round_trip(x, s);
      expect_within_bound(x, back, t, s, "spread " + std::to_string(kind) + (s ? " unsigned" : " signed"));
      // Mean relative error in the codes' normal range, and how many fall below it.
      double rel = 0;
      int64_t normal = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const double a = t.absmax(s, static_cast<int64_t>(i) / q::kQuantBlock);
        if (std::abs(x[i]) < a * std::ldexp(1.0, s ? -30 : -14) / 1.875) continue;
        rel += std::abs(back[i] - x[i]) / std::abs(x[i]);
        ++normal;
      }
      std::printf("spread %d %s: mean relative error %.4f over the %lld of %lld elements in the normal range\n", kind,
                  s ? "unsigned" : "signed", rel / double(normal), static_cast<long long>(normal),
                  static_cast<long long>(n));
    }
}

TEST(OptimState8Bit, EdgeBlocks) {
  const int64_t n = q::kQuantBlock + 5;
  OneTensor t(n);
  for (size_t s = 0; s < 2; ++s) {
    SCOPED_TRACE(s ? "unsigned" : "signed");
    // All zeros: absmax 0, codes 0, zeros back.
    std::vector<float> zeros(static_cast<size_t>(n), 0.0f);
    EXPECT_EQ(t.round_trip(zeros, s), zeros);
    EXPECT_EQ(t.absmax(s, 0), 0.0f);
    EXPECT_EQ(t.absmax(s, 1), 0.0f);
    // All equal: the absmax itself, exactly (negative too for the signed code).
    for (float c : {0.37f, -2.5e-7f, 3e12f}) {
      if (s == 1 && c < 0) continue;
      std::vector<float> same(static_cast<size_t>(n), c);
      EXPECT_EQ(t.round_trip(same, s), same) << c;
    }
    // One outlier: it comes back exactly, the others within the bound (the
    // signed code's even steps below 3.3e-5 of the absmax; the unsigned
    // code's 32 binades keep 6.25%).
    std::vector<float> x(static_cast<size_t>(n));
    std::mt19937 gen(3);
    std::uniform_real_distribution<float> u(0.5e-3f, 2e-3f);
    for (float& e : x) e = s == 0 && gen() % 2 ? -u(gen) : u(gen);
    x[700] = 1e3f;
    const std::vector<float> back = t.round_trip(x, s);
    EXPECT_EQ(back[700], 1e3f);
    expect_within_bound(x, back, t, s, "one outlier");
    if (s == 1) {
      for (size_t i = 0; i < q::kQuantBlock; ++i) EXPECT_GT(back[i], 0.0f) << "a positive second moment became 0";
    }
  }
}

// ---------------------------------------------------------------- update graphs

namespace {

// Parameters of the given shapes with gradients the test writes, and the
// optimizer's update node over them.
struct UpdateGraph {
  Graph g;
  std::vector<ValueId> params, grads;
  UpdateGraph(const std::vector<Shape>& shapes, const OptimizerConfig& oc, bool update = true) {
    for (const Shape& s : shapes) add(s);
    if (update) append_optimizer(g, oc);
  }
  void add(const Shape& shape) {
    const std::string name = std::string("p").append(std::to_string(params.size()));
    const ValueId p = g.param(name, shape);
    Value gv;
    gv.name = name + ".grad";
    gv.shape = shape;
    gv.cls = VClass::ParamGrad;
    gv.grad_of = p;
    const ValueId gid = g.add_value(gv);
    g.value(p).grad = gid;
    params.push_back(p);
    grads.push_back(gid);
  }
};

float test_value(uint64_t seed, int64_t i, float scale) {
  return rng::uniform_sym(rng::stream_key(seed, 77, 0), static_cast<uint64_t>(i), scale);
}

void fill(Executor& ex, ValueId v, uint64_t seed, float scale) {
  std::vector<float> x(static_cast<size_t>(numel(ex.graph().value(v).shape)));
  for (size_t i = 0; i < x.size(); ++i) x[i] = test_value(seed, static_cast<int64_t>(i), scale);
  ex.write_f32(v, x.data());
}

std::vector<float> read(Executor& ex, ValueId v) {
  std::vector<float> x(static_cast<size_t>(numel(ex.graph().value(v).shape)));
  ex.read_f32(v, x.data());
  return x;
}

// Moment s of tensor t as f32, whatever its storage.
std::vector<float> moment(Executor& ex, const UpdateGraph& u, size_t s, size_t t) {
  const Graph& g = u.g;
  const Node& n = g.node(static_cast<NodeId>(g.num_nodes() - 1));
  const size_t k = u.params.size();
  const ValueId v = n.inputs[(2 + s) * k + t];
  const size_t count = static_cast<size_t>(numel(g.value(v).shape));
  std::vector<float> x(count);
  if (g.value(v).dtype == DType::bf16) {
    for (size_t i = 0; i < count; ++i) x[i] = kernels::bf16_to_f32(ex.ptr<kernels::bf16_t>(v)[i]);
  } else if (g.value(v).dtype == DType::u8) {
    const size_t moments = static_cast<size_t>(n.attrs.i("states")) - 1;
    const float* sc = ex.ptr<float>(n.inputs[(2 + moments) * k + t]);
    const auto& table = s == 0 ? q::kSignedTable : q::kUnsignedTable;
    const int64_t blocks = q::blocks_of(static_cast<int64_t>(count));
    for (size_t i = 0; i < count; ++i)
      x[i] = table[ex.ptr<uint8_t>(v)[i]] * sc[static_cast<int64_t>(s) * blocks + static_cast<int64_t>(i) / q::kQuantBlock];
  } else {
    ex.read_f32(v, x.data());
  }
  return x;
}

// Equal, or both NaN (a poisoned moment stays as it was).
bool same_float(float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); }

ExecConfig config(Backend b) {
  ExecConfig c;
  c.backend = b;
  c.verify = true;
  return c;
}

OptimizerConfig optimizer(const std::string& kind, const std::string& state) {
  OptimizerConfig oc;
  oc.kind = kind;
  oc.state = state;
  oc.weight_decay = kind == "adamw" ? 0.1 : 1e-3;
  return oc;
}

}  // namespace

// A NaN or Inf gradient, and a NaN in the stored state, make the step throw
// an error naming the tensor; the block holding it keeps its parameters and
// its state.
TEST(OptimState, NonFiniteGradientOrStateIsRefused) {
  for (Backend b : {Backend::Cpu, Backend::Reference})
    for (std::string state : {"8bit", "bf16"})
      for (int poison = 0; poison < 3; ++poison) {
        SCOPED_TRACE(std::string(backend_name(b)) + " " + state + " poison " + std::to_string(poison));
        UpdateGraph u({{50000}, {7}}, optimizer("adamw", state));
        Executor ex(u.g, config(b));
        ex.init_params(1);
        fill(ex, u.params[0], 1, 1.0f);
        fill(ex, u.grads[0], 2, 1e-2f);
        fill(ex, u.grads[1], 3, 1e-2f);
        kernels::StepContext ctx;
        ctx.lr = 1e-3;
        ex.run(ctx);  // finite: fine
        ctx.step = 1;
        const int64_t at = 3 * q::kQuantBlock + 100;  // in block 3
        if (poison == 0) ex.ptr<float>(u.grads[0])[at] = std::numeric_limits<float>::quiet_NaN();
        if (poison == 1) ex.ptr<float>(u.grads[0])[at] = -std::numeric_limits<float>::infinity();
        const Node& n = u.g.node(static_cast<NodeId>(u.g.num_nodes() - 1));
        if (poison == 2) {
          if (state == "8bit") ex.ptr<float>(n.inputs[2 * 2 + 2 * 2 + 0])[3] = std::numeric_limits<float>::quiet_NaN();
          else ex.ptr<kernels::bf16_t>(n.inputs[2 * 2 + 0])[at] = 0x7fc0;  // exp_avg of p0
        }
        const std::vector<float> w_before = read(ex, u.params[0]);
        const std::vector<float> m_before = moment(ex, u, 0, 0), v_before = moment(ex, u, 1, 0);
        try {
          ex.run(ctx);
          ADD_FAILURE() << "a non-finite input was not refused";
        } catch (const std::runtime_error& e) {
          const std::string msg = e.what();
          EXPECT_NE(msg.find("'p0'"), std::string::npos) << msg;
          EXPECT_NE(msg.find("NaN or Inf"), std::string::npos) << msg;
          EXPECT_NE(msg.find("elements 6144 to 8192"), std::string::npos) << msg;
        }
        const std::vector<float> w_after = read(ex, u.params[0]);
        const std::vector<float> m_after = moment(ex, u, 0, 0), v_after = moment(ex, u, 1, 0);
        for (size_t i = 3 * q::kQuantBlock; i < 4 * q::kQuantBlock; ++i) {
          ASSERT_EQ(w_after[i], w_before[i]) << "element " << i;
          ASSERT_TRUE(same_float(m_after[i], m_before[i])) << "element " << i;
          ASSERT_EQ(v_after[i], v_before[i]) << "element " << i;
        }
        // The other blocks were updated.
        EXPECT_NE(w_after[0], w_before[0]);
      }
}

// An update split into one node per parameter (as an update run inside
// backward has it) stores the same bytes as one node over all parameters:
// each parameter's blocks, scales and rounding bits are its own.
TEST(OptimState, OneNodePerParameterUpdatesAlike) {
  const std::vector<Shape> shapes = {{5000}, {300, 20}, {9}};
  for (std::string kind : {"adamw", "sgd", "adafactor"})
    for (std::string state : {"fp32", "bf16", "8bit"}) {
      if (kind == "adafactor" && state != "fp32") continue;
      SCOPED_TRACE(kind + " " + state);
      OptimizerConfig oc = optimizer(kind, state);
      UpdateGraph one(shapes, oc);
      // The same parameters with one update node each.
      UpdateGraph split({}, oc, false);
      for (size_t t = 0; t < shapes.size(); ++t) split.add(shapes[t]);
      for (size_t t = 0; t < shapes.size(); ++t) {
        for (size_t u = 0; u < shapes.size(); ++u) split.g.value(split.params[u]).trainable = u == t;
        append_optimizer(split.g, oc);
      }
      Executor a(one.g, config(Backend::Cpu)), b(split.g, config(Backend::Cpu));
      for (Executor* e : {&a, &b}) e->init_params(1);
      kernels::StepContext ctx;
      ctx.lr = 1e-2;
      ctx.seed = 4;
      for (int step = 0; step < 3; ++step) {
        ctx.step = step;
        for (size_t t = 0; t < shapes.size(); ++t) {
          fill(a, one.grads[t], 10 * step + t, 0.05f);
          fill(b, split.grads[t], 10 * step + t, 0.05f);
        }
        a.run(ctx);
        b.run(ctx);
      }
      size_t compared = 0;
      for (size_t v = 0; v < one.g.num_values(); ++v) {
        const Value& val = one.g.value(static_cast<ValueId>(v));
        if (val.cls != VClass::Param && val.cls != VClass::OptState) continue;
        ++compared;
        const ValueId w = split.g.find(val.name);
        ASSERT_NE(w, kNone) << val.name;
        ASSERT_EQ(a.value_bytes(static_cast<ValueId>(v)), b.value_bytes(w)) << val.name;
        EXPECT_EQ(std::memcmp(a.data(static_cast<ValueId>(v)), b.data(w), a.value_bytes(static_cast<ValueId>(v))), 0)
            << val.name;
      }
      EXPECT_EQ(compared, shapes.size() * (kind == "sgd" ? 2 : 3) + (state == "8bit" ? shapes.size() : 0));
      EXPECT_EQ(train::update_begin(split.g), split.g.num_nodes() - shapes.size());  // three update nodes
    }
}

// The fast kernels against the reference on fixed gradients, four steps:
// the same codec (kernels/optim_state.hpp) and the same formulas in the
// same order, so what differs is the compiler's contraction of a * b + c:
// an f32 rounding of a moment, which can move a code across a rounding
// boundary. A moved code moves its moment by one step of the code (1/8
// relative), and the parameter by at most 1/8 of an update (lr); everything
// else agrees to f32 roundings.
TEST(OptimState, CpuKernelsMatchTheReference) {
  const std::vector<Shape> shapes = {{100003}, {17, 3}, {4096}, {2, 2048}, {5}};
  for (std::string kind : {"sgd", "adam", "adamw"})
    for (std::string state : {"bf16", "8bit"})
      for (double clip : {0.0, 1.0}) {
        SCOPED_TRACE(kind + " " + state + " clip " + std::to_string(clip));
        OptimizerConfig oc = optimizer(kind, state);
        oc.clip_grad_norm = clip;
        oc.nesterov = clip > 0;
        UpdateGraph u(shapes, oc);
        std::vector<std::unique_ptr<Executor>> ex;
        for (Backend b : {Backend::Cpu, Backend::Reference}) {
          ex.push_back(std::make_unique<Executor>(u.g, config(b)));
          ex.back()->init_params(1);
          for (size_t t = 0; t < shapes.size(); ++t) fill(*ex.back(), u.params[t], 10 + t, 1.0f);
        }
        const size_t node = u.g.num_nodes() - 1;
        const std::string op = kind == "sgd" ? "sgd_update" : "adam_update";
        EXPECT_EQ(std::string(ex[0]->kernel_name(node)), "cpu." + op);
        EXPECT_EQ(std::string(ex[1]->kernel_name(node)), "ref." + op);
        kernels::StepContext ctx;
        ctx.lr = 1e-2;
        ctx.grad_scale = 0.7;
        ctx.seed = 9;
        for (int step = 0; step < 4; ++step) {
          ctx.step = step;
          for (auto& e : ex) {
            for (size_t t = 0; t < shapes.size(); ++t) fill(*e, u.grads[t], 100 * step + t, 0.05f);
            e->run(ctx);
          }
        }
        const size_t moments = kind == "sgd" ? 1 : 2;
        for (size_t t = 0; t < shapes.size(); ++t) {
          const std::vector<float> wc = read(*ex[0], u.params[t]), wr = read(*ex[1], u.params[t]);
          size_t moved = 0;
          for (size_t i = 0; i < wc.size(); ++i) {
            const double d = std::abs(double(wc[i]) - double(wr[i]));
            if (d > 1e-6 * (std::abs(wr[i]) + 1)) ++moved;
            ASSERT_LE(d, 4 * 0.125 * ctx.lr * (kind == "sgd" ? 0.5 : 1.0) + 1e-6) << "p" << t << "[" << i << "]";
          }
          EXPECT_LE(moved, wc.size() / 100 + 1) << "p" << t << ": parameters off by more than f32 roundings";
          for (size_t s = 0; s < moments; ++s) {
            const std::vector<float> mc = moment(*ex[0], u, s, t), mr = moment(*ex[1], u, s, t);
            size_t diff = 0;
            for (size_t i = 0; i < mc.size(); ++i) diff += mc[i] != mr[i];
            EXPECT_LE(diff, mc.size() / 100 + 1) << "p" << t << " moment " << s << ": " << diff << " of " << mc.size()
                                                 << " differ";
          }
        }
      }
}

// ---------------------------------------------------------------- gpt-tiny

namespace {

using memfit::testing::feed_markov;
using memfit::testing::gpt_tiny;
using memfit::testing::kB;
using memfit::testing::kT;
using memfit::testing::kVocab;

std::vector<double> train_losses(const OptimizerConfig& oc, int steps, double lr) {
  const auto sg = train::build_step_graph(gpt_tiny(oc));
  Executor ex(sg->g, ExecConfig{});
  ex.init_params(1);
  kernels::StepContext ctx;
  ctx.lr = lr;
  ctx.seed = 1;
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    feed_markov(ex, *sg, step);
    ctx.step = step;
    ex.run(ctx);
    losses.push_back(ex.fetch_scalar(sg->loss));
  }
  return losses;
}

OptimizerConfig adamw(const std::string& state, int64_t quantise_min = 4096) {
  OptimizerConfig oc;
  oc.kind = "adamw";
  oc.weight_decay = 1e-2;
  oc.state = state;
  oc.quantise_min = quantise_min;
  return oc;
}

}  // namespace

// 200 steps of AdamW with 8-bit moments end within 1% of fp32's loss: with
// the default threshold (gpt-tiny's two 4096-element MLP matrices per layer
// quantised) and with every tensor quantised (threshold 0). bf16 moments
// likewise.
TEST(OptimState, GptTinyCompactAdamWTracksFp32) {
  const double lr = 3e-3;
  const std::vector<double> ref = train_losses(adamw("fp32"), 200, lr);
  EXPECT_LT(ref.back(), 0.75 * ref.front()) << "fp32 AdamW did not learn: " << ref.front() << " -> " << ref.back();
  for (const auto& [name, oc] : std::vector<std::pair<std::string, OptimizerConfig>>{
           {"8bit", adamw("8bit")}, {"8bit, every tensor", adamw("8bit", 0)}, {"bf16", adamw("bf16")}}) {
    const std::vector<double> l = train_losses(oc, 200, lr);
    const double rel = std::abs(l.back() - ref.back()) / ref.back();
    std::printf("%-20s loss %.4f -> %.4f (fp32 %.4f -> %.4f): %.3f%% apart\n", name.c_str(), l.front(), l.back(),
                ref.front(), ref.back(), 100 * rel);
    EXPECT_EQ(l.front(), ref.front()) << name << ": the first forward pass precedes any update";
    EXPECT_LT(rel, 0.01) << name << ": final loss " << l.back() << " vs fp32 " << ref.back();
  }
}

TEST(OptimState, GptTinyAdafactorLearns) {
  OptimizerConfig oc;
  oc.kind = "adafactor";  // relative step size, no first moment
  const std::vector<double> l = train_losses(oc, 200, 0.0);
  std::printf("adafactor: loss %.4f -> %.4f\n", l.front(), l.back());
  EXPECT_LT(l.back(), 0.75 * l.front());
  oc.relative_step = false;  // the given learning rate as the step
  const std::vector<double> f = train_losses(oc, 200, 1e-2);
  std::printf("adafactor lr 1e-2: loss %.4f -> %.4f\n", f.front(), f.back());
  EXPECT_LT(f.back(), 0.75 * f.front());
}

namespace {

// Adafactor (Shazeer & Stern 2018, Algorithm 4 with the update clipping of
// section 6 and the relative step of section 8; no first moment), in double,
// for one parameter: w, g (already scaled), its row and column factors (or
// its whole second moment when rows == 0), at step t (1-based).
void adafactor_reference(std::vector<double>& w, const std::vector<double>& g, std::vector<double>& r,
                         std::vector<double>& c, int64_t rows, int64_t t, const OptimizerConfig& oc, double lr,
                         double wd) {
  const size_t n = w.size();
  const double rho = 1.0 - std::pow(static_cast<double>(t), oc.decay_rate);
  double alpha = lr;
  if (oc.relative_step) {
    double ss = 0;
    for (double x : w) ss += x * x;
    alpha = std::min(1e-2, 1.0 / std::sqrt(static_cast<double>(t))) * std::max(oc.eps2, std::sqrt(ss / double(n)));
  }
  std::vector<double> u(n);
  if (rows) {
    const size_t R = static_cast<size_t>(rows), C = n / R;
    for (size_t i = 0; i < R; ++i) {
      double s = 0;
      for (size_t j = 0; j < C; ++j) s += g[i * C + j] * g[i * C + j] + oc.eps1;
      r[i] = rho * r[i] + (1 - rho) * s / double(C);
    }
    for (size_t j = 0; j < C; ++j) {
      double s = 0;
      for (size_t i = 0; i < R; ++i) s += g[i * C + j] * g[i * C + j] + oc.eps1;
      c[j] = rho * c[j] + (1 - rho) * s / double(R);
    }
    double rsum = 0;
    for (double x : r) rsum += x;
    for (size_t i = 0; i < R; ++i)
      for (size_t j = 0; j < C; ++j) {
        const double v = r[i] * c[j] / rsum * double(R);  // r c / mean(r): the factored second moment
        u[i * C + j] = g[i * C + j] / std::sqrt(v);
      }
  } else {
    for (size_t i = 0; i < n; ++i) {
      r[i] = rho * r[i] + (1 - rho) * (g[i] * g[i] + oc.eps1);
      u[i] = g[i] / std::sqrt(r[i]);
    }
  }
  double uu = 0;
  for (double x : u) uu += x * x;
  const double d = std::max(1.0, std::sqrt(uu / double(n)) / oc.clip_threshold);
  for (size_t i = 0; i < n; ++i) w[i] = w[i] - alpha * wd * w[i] - alpha * u[i] / d;
}

std::vector<double> as_double(const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); }

}  // namespace

// Each of four Adafactor steps on gpt-tiny, from the same parameters,
// gradients and factors, against the double implementation above, on the
// fast and the reference kernels. The kernels compute in f32 with sums in
// double: a factor is a mean of squares rounded to f32 once (relative 2^-23
// after the sums' error of about n 2^-53); an update element passes a
// handful of f32 operations (divisions, square roots: within 8 ulp, 1e-6
// relative); so each parameter is within 1e-6 of its value plus 1e-5 of
// the step it took.
TEST(OptimState, AdafactorMatchesADoublePrecisionReference) {
  for (Backend b : {Backend::Cpu, Backend::Reference})
    for (int variant = 0; variant < 2; ++variant) {
      SCOPED_TRACE(std::string(backend_name(b)) + (variant ? " lr 1e-2, wd 0.1, grad scale 0.5" : " relative step"));
      OptimizerConfig oc;
      oc.kind = "adafactor";
      oc.relative_step = variant == 0;
      oc.weight_decay = variant ? 0.1 : 0.0;
      const auto sg = train::build_step_graph(gpt_tiny(oc));
      const Graph& g = sg->g;
      ExecConfig cfg;
      cfg.backend = b;
      Executor ex(g, cfg);
      ex.init_params(2);
      const size_t ub = train::update_begin(g);
      const Node& n = g.node(static_cast<NodeId>(ub));
      ASSERT_EQ(n.op, "adafactor_update");
      const size_t k = static_cast<size_t>(n.attrs.i("count"));
      const auto& rows = n.attrs.ints("rows");
      kernels::StepContext ctx;
      ctx.lr = variant ? 1e-2 : 0.0;
      ctx.grad_scale = variant ? 0.5 : 1.0;
      for (int step = 0; step < 4; ++step) {
        feed_markov(ex, *sg, step);
        ctx.step = step;
        ex.run_nodes(0, ub, ctx);
        std::vector<std::vector<double>> w(k), w0(k), r(k), c(k);
        for (size_t t = 0; t < k; ++t) {
          w[t] = w0[t] = as_double(read(ex, n.inputs[t]));
          std::vector<double> gr = as_double(read(ex, n.inputs[k + t]));
          for (double& x : gr) x *= ctx.grad_scale;
          r[t] = as_double(read(ex, n.inputs[2 * k + t]));
          c[t] = as_double(read(ex, n.inputs[3 * k + t]));
          adafactor_reference(w[t], gr, r[t], c[t], rows[t], step + 1, oc, ctx.lr,
                              n.attrs.ints("decay")[t] ? oc.weight_decay : 0.0);
        }
        ex.run_nodes(ub, g.num_nodes(), ctx);
        for (size_t t = 0; t < k; ++t) {
          const std::string name = g.value(n.inputs[t]).name;
          const std::vector<float> wk = read(ex, n.inputs[t]), rk = read(ex, n.inputs[2 * k + t]),
                                   ck = read(ex, n.inputs[3 * k + t]);
          for (size_t i = 0; i < wk.size(); ++i) {
            const double step_size = std::abs(w[t][i] - w0[t][i]);
            ASSERT_NEAR(wk[i], w[t][i], 1e-6 * std::abs(w[t][i]) + 1e-5 * step_size + 1e-12)
                << name << "[" << i << "] step " << step;
          }
          for (size_t i = 0; i < rk.size(); ++i) ASSERT_NEAR(rk[i], r[t][i], 1e-6 * r[t][i]) << name << " row " << i;
          if (rows[t]) {
            for (size_t i = 0; i < ck.size(); ++i) ASSERT_NEAR(ck[i], c[t][i], 1e-6 * c[t][i]) << name << " col " << i;
          }
        }
      }
    }
}

// ---------------------------------------------------------------- the plan

namespace {
size_t align64(size_t b) { return (b + 63) / 64 * 64; }
}  // namespace

// The plan's optimizer-state arena holds exactly each format's bytes: per
// trainable tensor of n elements (each value aligned to 64 bytes),
//   fp32       2 x 4n
//   bf16       2 x 2n
//   8bit       n >= 4096: 2 x n codes + 4 x 2 ceil(n / 2048) scales;
//              smaller: 2 x 4n and a 4-byte placeholder
//   adafactor  >= 2-d [R, ...]: 4 R + 4 n / R; 1-d: 4n and a placeholder
// (gpt2: 124M parameters, the report's B/param printed).
TEST(OptimState, PlanBytesEqualTheFormula) {
  train::StepSpec s;
  s.model = "gpt2";
  s.batch = 1;
  s.data = {{"tokens", DType::i32, {16}, 0.0, 50257}, {"targets", DType::i32, {16}, -1.0, 50257}};
  s.classes = 50257;
  for (std::string policy : {"fp32", "bf16", "8bit", "adafactor"}) {
    s.optimizer = policy == "adafactor" ? OptimizerConfig{.kind = "adafactor"} : adamw(policy);
    const auto sg = train::build_step_graph(s);
    size_t want = 0, fp32 = 0;
    int64_t params = 0;
    for (ValueId p : sg->g.trainable_params()) {
      const Shape& sh = sg->g.value(p).shape;
      const size_t n = static_cast<size_t>(numel(sh));
      params += static_cast<int64_t>(n);
      fp32 += 2 * align64(4 * n);
      if (policy == "fp32") want += 2 * align64(4 * n);
      if (policy == "bf16") want += 2 * align64(2 * n);
      if (policy == "8bit")
        want += n >= 4096 ? 2 * align64(n) + align64(4 * 2 * ((n + 2047) / 2048)) : 2 * align64(4 * n) + align64(4);
      if (policy == "adafactor")
        want += sh.size() >= 2 ? align64(4 * size_t(sh[0])) + align64(4 * n / size_t(sh[0])) : align64(4 * n) + align64(4);
    }
    ExecConfig cfg;
    cfg.defer_allocation = true;
    const Plan plan = plan_for(sg->g, cfg);
    const size_t got = plan.arena_bytes[static_cast<size_t>(Arena::OptState)];
    EXPECT_EQ(got, want) << policy;
    const train::MemoryReport r = train::make_report(sg->g, plan, train::MemoryInputs{});
    EXPECT_EQ(r.optstate, want);
    EXPECT_EQ(r.trainable, params);
    EXPECT_EQ(r.optstate_fp32, fp32) << policy;
    EXPECT_EQ(r.optstate_policy, policy == "adafactor" ? "adafactor factored" : policy);
    std::printf("gpt2 %-9s optimizer state %11zu bytes, %.3f B/param (%lld parameters; fp32 %zu bytes)\n",
                policy.c_str(), got, double(got) / double(params), static_cast<long long>(params), fp32);
  }
}
