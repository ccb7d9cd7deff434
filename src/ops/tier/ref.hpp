// The tier kernels: a whole value copied between the offload tier
// (StepContext::tier) and its planned buffer, at once or queued on the
// tier's I/O thread, and the wait for a buffer's queued copies. The same on
// every device: on one whose memory the host cannot address, the tier
// reaches the buffer through the device's copies (`via`, a BufferCopies);
// the bytes are copied as stored.
#pragma once

#include <stdexcept>
#include <utility>

#include "kernels/kernel.hpp"
#include "ops/tier/params.hpp"

namespace memfit::kernels::ref {

class TierCopy final : public Kernel {
 public:
  enum class Kind { Load, Store, Wait };  // tier_load (output 0), tier_store (input 0), tier_wait (input 0)
  // via: the device's copies, where the buffer is memory the host cannot
  // address (null: host memory). It outlives the kernel (the device's).
  TierCopy(Kind kind, TierParams p, const BufferCopies* via = nullptr) : kind_(kind), p_(std::move(p)), via_(via) {}
  bool copies_through_device() const override { return via_ != nullptr; }
  void run(const StepContext& ctx) override {
    if (!ctx.tier)
      throw std::logic_error("'" + p_.block + "' is tiered, but the step was run without its tier store");
    TierIO& t = *ctx.tier;
    switch (kind_) {
      case Kind::Load:
        return p_.async ? t.read_async(p_.block, out_[0], p_.bytes, via_) : t.read(p_.block, out_[0], p_.bytes, via_);
      case Kind::Store:
        return p_.async ? t.write_async(p_.block, in_[0], p_.bytes, via_) : t.write(p_.block, in_[0], p_.bytes, via_);
      case Kind::Wait: return t.wait(in_[0]);
    }
  }
  const char* name() const override {
    return kind_ == Kind::Load ? "tier.load" : kind_ == Kind::Store ? "tier.store" : "tier.wait";
  }

 private:
  Kind kind_;
  TierParams p_;
  const BufferCopies* via_;
};

}  // namespace memfit::kernels::ref
