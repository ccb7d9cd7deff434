// Executor::feed / fetch: the host <-> device copies the trainer uses for
// step inputs and outputs. Values are exact (relu of small integers), so the
// comparisons are exact; every backend stores the values its own way
// (Reference64: doubles), and the byte count is checked against that.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "memfit/builder.hpp"
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
