// n elements. Element i is kept iff uniform01(key, i) >= float(p), key =
// stream_key(seed, stream, step); kept values are scaled by 1/(1-p) computed
// in f32. The mask is a pure function of the index, so the loop splits freely
// across threads and matches the reference bitwise. y may be x's buffer and
// dx dy's.
#include "kernels/cpu/dropout.hpp"

#include "kernels/cpu/parallel.hpp"
#include "memfit/rng.hpp"

namespace memfit::kernels::cpu {
namespace {

// in: x  out: y, mask (u8)
class Dropout final : public Kernel {
 public:
  explicit Dropout(const DropoutParams& p) : p_(p) {}
  const char* name() const override { return "cpu.dropout"; }
  void run(const StepContext& ctx) override {
    const float* x = in<float>(0);
    float* y = out<float>(0);
    uint8_t* mask = out<uint8_t>(1);
    const uint64_t key = rng::stream_key(ctx.seed, p_.stream, static_cast<uint64_t>(ctx.step));
    // Micro-batch m of an accumulated step holds rows m*n..(m+1)*n-1 of the
    // whole batch: offset the element index so the masks equal the big batch's.
    const uint64_t base = static_cast<uint64_t>(ctx.micro) * static_cast<uint64_t>(p_.n);
    const float pf = static_cast<float>(p_.p);
    const float scale = 1.0f / (1.0f - pf);
    const int64_t n = p_.n;
    parallel_for_simd(n, [&](int64_t i) {
      const bool keep = rng::uniform01(key, base + static_cast<uint64_t>(i)) >= pf;
      const float v = x[i] * scale;  // unconditional: the loop vectorises
      mask[i] = keep ? 1 : 0;
      y[i] = keep ? v : 0.0f;
    });
  }

 private:
  DropoutParams p_;
};

// in: dy, mask  out: dx
class DropoutBwd final : public Kernel {
 public:
  explicit DropoutBwd(const DropoutParams& p) : p_(p) {}
  const char* name() const override { return "cpu.dropout_bwd"; }
  void run(const StepContext&) override {
    const float* dy = in<float>(0);
    const uint8_t* mask = in<uint8_t>(1);
    float* dx = out<float>(0);
    const float scale = 1.0f / (1.0f - static_cast<float>(p_.p));
    const int64_t n = p_.n;
    parallel_for_simd(n, [&](int64_t i) {
      const float g = dy[i] * scale;  // unconditional: the loop vectorises
      dx[i] = mask[i] ? g : 0.0f;
    });
  }

 private:
  DropoutParams p_;
};

}  // namespace

std::unique_ptr<Kernel> make_dropout(const DropoutParams& p) { return std::make_unique<Dropout>(p); }
std::unique_ptr<Kernel> make_dropout_bwd(const DropoutParams& p) { return std::make_unique<DropoutBwd>(p); }

}  // namespace memfit::kernels::cpu
