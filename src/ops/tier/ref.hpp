// The tier kernels: a whole value copied between the offload tier
// (StepContext::tier) and its planned buffer, at once or queued on the
// tier's I/O thread, and the wait for a buffer's queued copies. The same on
// every host device; the bytes are copied as stored.
#pragma once

#include <stdexcept>
#include <utility>

#include "kernels/kernel.hpp"
#include "ops/tier/params.hpp"

namespace memfit::kernels::ref {

class TierCopy final : public Kernel {
 public:
  enum class Kind { Load, Store, Wait };  // tier_load (output 0), tier_store (input 0), tier_wait (input 0)
  TierCopy(Kind kind, TierParams p) : kind_(kind), p_(std::move(p)) {}
  void run(const StepContext& ctx) override {
    if (!ctx.tier)
      throw std::logic_error("'" + p_.block + "' is tiered, but the step was run without its tier store");
    TierIO& t = *ctx.tier;
    switch (kind_) {
      case Kind::Load: return p_.async ? t.read_async(p_.block, out_[0], p_.bytes) : t.read(p_.block, out_[0], p_.bytes);
      case Kind::Store: return p_.async ? t.write_async(p_.block, in_[0], p_.bytes) : t.write(p_.block, in_[0], p_.bytes);
      case Kind::Wait: return t.wait(in_[0]);
    }
  }
  const char* name() const override {
    return kind_ == Kind::Load ? "tier.load" : kind_ == Kind::Store ? "tier.store" : "tier.wait";
  }

 private:
  Kind kind_;
  TierParams p_;
};

}  // namespace memfit::kernels::ref
