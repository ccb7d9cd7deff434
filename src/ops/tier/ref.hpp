// The tier kernels: a whole value copied between the offload tier
// (StepContext::tier) and its planned buffer. The same on every host
// device; the bytes are copied as stored.
#pragma once

#include <stdexcept>

#include "kernels/kernel.hpp"
#include "ops/tier/params.hpp"

namespace memfit::kernels::ref {

inline TierIO& tier_of(const StepContext& ctx, const TierParams& p) {
  if (!ctx.tier)
    throw std::logic_error("'" + p.block + "' is tiered, but the step was run without its tier store");
  return *ctx.tier;
}

class TierLoad final : public Kernel {
 public:
  explicit TierLoad(TierParams p) : p_(std::move(p)) {}
  void run(const StepContext& ctx) override {
    if (p_.async) tier_of(ctx, p_).read_async(p_.block, out_[0], p_.bytes);
    else tier_of(ctx, p_).read(p_.block, out_[0], p_.bytes);
  }
  const char* name() const override { return "tier.load"; }

 private:
  TierParams p_;
};

class TierStore final : public Kernel {
 public:
  explicit TierStore(TierParams p) : p_(std::move(p)) {}
  void run(const StepContext& ctx) override {
    if (p_.async) tier_of(ctx, p_).write_async(p_.block, in_[0], p_.bytes);
    else tier_of(ctx, p_).write(p_.block, in_[0], p_.bytes);
  }
  const char* name() const override { return "tier.store"; }

 private:
  TierParams p_;
};

// Waits for the queued copies of its buffer (input 0).
class TierWait final : public Kernel {
 public:
  explicit TierWait(TierParams p) : p_(std::move(p)) {}
  void run(const StepContext& ctx) override { tier_of(ctx, p_).wait(in_[0]); }
  const char* name() const override { return "tier.wait"; }

 private:
  TierParams p_;
};

}  // namespace memfit::kernels::ref
