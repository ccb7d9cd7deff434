#include "ops/broadcast/cpu.hpp"

#include <algorithm>

#include "kernels/cpu/parallel.hpp"

namespace memfit::kernels::cpu {
namespace {

class AddBroadcast final : public Kernel {
 public:
  explicit AddBroadcast(const BroadcastParams& p) : p_(p) {}
  const char* name() const override { return "cpu.add_broadcast"; }
  void run(const StepContext&) override {
    const float* a = in<float>(0);
    const float* b = in<float>(1);
    float* y = out<float>(0);
    const int64_t S = p_.S;
    parallel_for(p_.R, p_.R * S, [&](int64_t r) {
      const float* ar = a + r * S;
      float* yr = y + r * S;
#pragma omp simd
      for (int64_t s = 0; s < S; ++s) yr[s] = ar[s] + b[s];
    });
  }

 private:
  BroadcastParams p_;
};

class SumLeading final : public Kernel {
 public:
  explicit SumLeading(const BroadcastParams& p) : p_(p) {}
  const char* name() const override { return "cpu.sum_leading"; }
  void run(const StepContext&) override {
    const float* x = in<float>(0);
    float* y = out<float>(0);
    const int64_t R = p_.R, S = p_.S;
    const int64_t blocks = (S + kBlock - 1) / kBlock;
    parallel_for(blocks, R * S, [&](int64_t blk) {
      const int64_t s0 = blk * kBlock, len = std::min(kBlock, S - s0);
      double acc[kBlock] = {};
      for (int64_t r = 0; r < R; ++r) {
        const float* xr = x + r * S + s0;
#pragma omp simd
        for (int64_t j = 0; j < len; ++j) acc[j] += static_cast<double>(xr[j]);
      }
      for (int64_t j = 0; j < len; ++j) y[s0 + j] = static_cast<float>(acc[j]);
    });
  }

 private:
  static constexpr int64_t kBlock = 64;
  BroadcastParams p_;
};

}  // namespace

std::unique_ptr<Kernel> make_add_broadcast(const BroadcastParams& p) { return std::make_unique<AddBroadcast>(p); }
std::unique_ptr<Kernel> make_sum_leading(const BroadcastParams& p) { return std::make_unique<SumLeading>(p); }

}  // namespace memfit::kernels::cpu
