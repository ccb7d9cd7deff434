// Executor::feed / fetch: the host <-> device copies the trainer uses for
// step inputs and outputs. Values are exact (relu of small integers), so the
// comparisons are exact; every backend stores the values its own way
// (Reference64: doubles), and the byte count is checked against that.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "memfit/builder.hpp"
#include "memfit/graph.hpp"
#include "memfit/runtime.hpp"
#include "kernels/kernel.hpp"

using namespace memfit;

namespace {

struct Tiny {
  Graph g;
  ValueId x, y;
  Tiny() {
    Builder b(g, false);
    x = g.input("x", {2, 3});
    y = relu(b, x);
    g.value(y).is_output = true;
  }
};

template <class T>
void roundtrip(Backend backend) {
  Tiny t;
  ExecConfig cfg;
  cfg.backend = backend;
  Executor ex(t.g, cfg);
  ASSERT_EQ(ex.value_bytes(t.x), 6 * sizeof(T));
  const std::vector<T> in{-1, 2, -3, 4, 0, 6};
  ex.feed(t.x, in.data(), in.size() * sizeof(T));
  ex.run(kernels::StepContext{});
  std::vector<T> out(6, T(99));
  ex.fetch(t.y, out.data(), out.size() * sizeof(T));
  EXPECT_EQ(out, (std::vector<T>{0, 2, 0, 4, 0, 6}));
}

}  // namespace

TEST(ExecutorIo, FeedRunFetchCpu) { roundtrip<float>(Backend::Cpu); }
TEST(ExecutorIo, FeedRunFetchReference) { roundtrip<float>(Backend::Reference); }
TEST(ExecutorIo, FeedRunFetchReference64StoresDoubles) { roundtrip<double>(Backend::Reference64); }

TEST(ExecutorIo, WrongSizeIsRefusedNamingTheValue) {
  Tiny t;
  Executor ex(t.g, ExecConfig{});
  std::vector<float> in(5);
  try {
    ex.feed(t.x, in.data(), in.size() * sizeof(float));
    FAIL() << "a short feed was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("24"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ex.fetch(t.y, in.data(), in.size() * sizeof(float)), std::invalid_argument);
  EXPECT_THROW(ex.fetch_scalar(t.y), std::invalid_argument);  // 6 elements, not a scalar
}

TEST(ExecutorIo, NothingMovesBeforeAllocation) {
  Tiny t;
  ExecConfig cfg;
  cfg.defer_allocation = true;
  Executor ex(t.g, cfg);
  std::vector<float> in(6);
  EXPECT_THROW(ex.feed(t.x, in.data(), in.size() * sizeof(float)), std::logic_error);
}

// The reference device in double: whole values cross as doubles (feed /
// fetch), f32 copies convert element by element through host chunks
// (write_f32 / read_f32 over more than one chunk), and parameters are
// initialised to the same values as in f32 storage.
TEST(ExecutorIo, Reference64DeviceCopiesDoubles) {
  Graph g;
  Builder b(g, false);
  const int64_t n = 2500;  // more than one 1024-element chunk
  ValueId x = g.input("x", {1, n});
  ValueId w = g.param("w", {1, n}, false);
  g.value(w).init = InitSpec{InitSpec::Uniform, 0.5};
  ValueId y = add(b, relu(b, x), w);
  g.value(y).is_output = true;
  ExecConfig cfg;
  cfg.backend = Backend::Reference64;
  Executor wide(g, cfg);
  cfg.backend = Backend::Reference;
  Executor narrow(g, cfg);
  ASSERT_EQ(wide.value_bytes(x), static_cast<size_t>(n) * 8);
  wide.init_params(7);
  narrow.init_params(7);
  std::vector<float> w32(n), w64(n);
  narrow.read_f32(w, w32.data());
  wide.read_f32(w, w64.data());
  EXPECT_EQ(w32, w64);
  std::vector<double> wd(static_cast<size_t>(n));
  wide.fetch(w, wd.data(), wd.size() * 8);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(wd[static_cast<size_t>(i)], static_cast<double>(w32[static_cast<size_t>(i)])) << i;

  std::vector<float> xf(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) xf[static_cast<size_t>(i)] = static_cast<float>(i % 7) - 3.0f;
  wide.write_f32(x, xf.data());
  std::vector<double> xd(static_cast<size_t>(n));
  wide.fetch(x, xd.data(), xd.size() * 8);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(xd[static_cast<size_t>(i)], xf[static_cast<size_t>(i)]) << i;
  // A double that is not a float survives feed/fetch exactly.
  xd[0] = 1.0 + 0x1p-40;
  wide.feed(x, xd.data(), xd.size() * 8);
  wide.run(kernels::StepContext{});
  std::vector<double> yd(static_cast<size_t>(n));
  wide.fetch(y, yd.data(), yd.size() * 8);
  EXPECT_EQ(yd[0], 1.0 + 0x1p-40 + wd[0]);
  for (int64_t i = 1; i < n; ++i)
    ASSERT_EQ(yd[static_cast<size_t>(i)], std::max(0.0, xd[static_cast<size_t>(i)]) + wd[static_cast<size_t>(i)]) << i;
  std::vector<float> yf(static_cast<size_t>(n));
  wide.read_f32(y, yf.data());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(yf[static_cast<size_t>(i)], static_cast<float>(yd[static_cast<size_t>(i)])) << i;
}

TEST(ExecutorIo, FetchScalarReference64) {
  Graph g;
  Builder b(g, false);
  ValueId x = g.input("x", {1});
  ValueId y = relu(b, x);
  g.value(y).is_output = true;
  ExecConfig cfg;
  cfg.backend = Backend::Reference64;
  Executor ex(g, cfg);
  const double v = 0.1;  // not a float
  ex.feed(x, &v, 8);
  ex.run(kernels::StepContext{});
  EXPECT_EQ(ex.fetch_scalar(y), 0.1);
}
