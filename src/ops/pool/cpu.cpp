// N batch, C channels, H/W input size, R/S window, OH/OW output size.
//
// Padding is symmetric (pad_l = pad_r = pad) but for max pooling's ceil
// mode, whose extra end padding (PoolParams::pad_h_end) never wins a max;
// oneDNN's output size is then the graph's and every window lies inside
// the padded input: "include padding" divides by R*S, as the graph's
// count_include_pad does; "exclude padding" by the valid elements.
//
// bf16 (act = BF16): max/avg pooling are oneDNN's bf16 pooling primitives on
// NCHW bf16 data; global average pooling is the f32 kernel's loop on bf16
// storage (AVX-512; f32 sums, one rounding of the mean; the backward rounds
// dy / HW once).
#include "ops/pool/cpu.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/bf16_simd.hpp"
#include "kernels/cpu/dnnl_util.hpp"
#include "kernels/cpu/parallel.hpp"

namespace memfit::kernels::cpu {
namespace {

using dnnl::algorithm;
using dnnl::prop_kind;

struct PoolPds {
  dnnl::memory::desc x, y;
  dnnl::pooling_forward::primitive_desc fwd;
  dnnl::pooling_backward::primitive_desc bwd;
};

// Both directions are always built, so that forward and backward kernels for
// the same params agree on whether oneDNN handles them.
PoolPds pool_pds(const PoolParams& p, algorithm alg, ElemType act) {
  PoolPds d;
  if (act == ElemType::F32) {
    d.x = plain_f32({p.N, p.C, p.H, p.W});
    d.y = plain_f32({p.N, p.C, p.OH, p.OW});
  } else if (act == ElemType::BF16) {
    using tag = dnnl::memory::format_tag;
    d.x = dnnl::memory::desc({p.N, p.C, p.H, p.W}, dnnl::memory::data_type::bf16, tag::nchw);
    d.y = dnnl::memory::desc({p.N, p.C, p.OH, p.OW}, dnnl::memory::data_type::bf16, tag::nchw);
  } else {
    throw Unsupported{};
  }
  const dims strides{p.stride_h, p.stride_w}, kernel{p.R, p.S}, pad{p.pad_h, p.pad_w}, pad_end{p.end_pad_h(), p.end_pad_w()};
  dnnl::pooling_forward::desc fd(prop_kind::forward_training, alg, d.x, d.y, strides, kernel, pad, pad_end);
  d.fwd = {fd, user_scratchpad_attr(), engine()};
  dnnl::pooling_backward::desc bd(alg, d.x, d.y, strides, kernel, pad, pad_end);
  d.bwd = {bd, user_scratchpad_attr(), engine(), d.fwd};
  // The graph gives the workspace 4 bytes per output element.
  if (alg == algorithm::pooling_max &&
      d.fwd.workspace_desc().get_size() > static_cast<size_t>(p.N * p.C * p.OH * p.OW) * 4)
    throw Unsupported{};
  return d;
}

algorithm avg_alg(const PoolParams& p) {
  return p.count_include_pad ? algorithm::pooling_avg_include_padding : algorithm::pooling_avg_exclude_padding;
}

// in: x  out: y (, workspace)
class PoolFwd final : public Kernel {
 public:
  PoolFwd(const PoolParams& p, algorithm alg, ElemType act)
      : max_(alg == algorithm::pooling_max), bf16_(act == ElemType::BF16), d_(pool_pds(p, alg, act)) {
    call_.set(dnnl::pooling_forward(d_.fwd));
  }
  const char* name() const override {
    if (bf16_) return max_ ? "dnnl.max_pool2d.bf16" : "dnnl.avg_pool2d.bf16";
    return max_ ? "dnnl.max_pool2d" : "dnnl.avg_pool2d";
  }
  size_t scratch_bytes() const override { return scratchpad_bytes(d_.fwd); }
  void run(const StepContext&) override { call_.run(); }

 private:
  void on_bind() override {
    call_.clear_args();
    call_.arg(DNNL_ARG_SRC, d_.x, in_[0]);
    call_.arg(DNNL_ARG_DST, d_.y, out_[0]);
    if (max_) call_.arg(DNNL_ARG_WORKSPACE, d_.fwd.workspace_desc(), out_[1]);
    call_.arg(DNNL_ARG_SCRATCHPAD, d_.fwd.scratchpad_desc(), scratch_);
  }
  bool max_, bf16_;
  PoolPds d_;
  Call call_;
};

// in: dy (, workspace)  out: dx
class PoolBwd final : public Kernel {
 public:
  PoolBwd(const PoolParams& p, algorithm alg, ElemType act)
      : max_(alg == algorithm::pooling_max), bf16_(act == ElemType::BF16), d_(pool_pds(p, alg, act)) {
    call_.set(dnnl::pooling_backward(d_.bwd));
  }
  const char* name() const override {
    if (bf16_) return max_ ? "dnnl.max_pool2d_bwd.bf16" : "dnnl.avg_pool2d_bwd.bf16";
    return max_ ? "dnnl.max_pool2d_bwd" : "dnnl.avg_pool2d_bwd";
  }
  size_t scratch_bytes() const override { return scratchpad_bytes(d_.bwd); }
  void run(const StepContext&) override { call_.run(); }

 private:
  void on_bind() override {
    call_.clear_args();
    call_.arg(DNNL_ARG_DIFF_DST, d_.y, in_[0]);
    if (max_) call_.arg(DNNL_ARG_WORKSPACE, d_.bwd.workspace_desc(), in_[1]);
    call_.arg(DNNL_ARG_DIFF_SRC, d_.x, out_[0]);
    call_.arg(DNNL_ARG_SCRATCHPAD, d_.bwd.scratchpad_desc(), scratch_);
  }
  bool max_, bf16_;
  PoolPds d_;
  Call call_;
};

// Global average pooling, one template for both activation storage types
// (bf16: sums in f32 lanes, each output rounded once). Plain: rows of HW
// elements, one per (n, c). Blocked16: tiles of HW x 16, one per
// (n, channel block), the channels in the vector lanes.
template <class T>
class GlobalPool : public Kernel {
 public:
  GlobalPool(const GlobalPoolParams& p, Layout l) : p_(p), blocked_(l == Layout::Blocked16) {}

 protected:
  // "cpu.global_avg_pool" + op + (".blk16") + (".bf16")
  const char* name_of(bool bwd) const {
    static constexpr const char* kNames[2][2][2] = {
        {{"cpu.global_avg_pool", "cpu.global_avg_pool.bf16"},
         {"cpu.global_avg_pool.blk16", "cpu.global_avg_pool.blk16.bf16"}},
        {{"cpu.global_avg_pool_bwd", "cpu.global_avg_pool_bwd.bf16"},
         {"cpu.global_avg_pool_bwd.blk16", "cpu.global_avg_pool_bwd.blk16.bf16"}}};
    return kNames[bwd][blocked_][std::is_same_v<T, bf16_t>];
  }
  // f(t) for each Blocked16 tile or f(r) for each plain row.
  template <class F>
  void for_each(F&& f) const {
    const int64_t rows = p_.N * p_.C;
    parallel_for(blocked_ ? rows / kChannelBlock : rows, rows * p_.HW, f);
  }
  GlobalPoolParams p_;
  bool blocked_;
};

// Sum over the HW positions of a [HW][16] tile, in 16 f32 lanes: f32 tiles
// add the positions in order, bf16 tiles alternate two accumulators (the
// orders these kernels always had).
template <class T>
simd::V tile_sum(const T* xt, int64_t hw) {
  constexpr int K = std::is_same_v<T, bf16_t> ? 2 : 1;
  constexpr int64_t B = kChannelBlock;
  simd::V s[K];
  for (int k = 0; k < K; ++k) s[k] = simd::zero();
  int64_t i = 0;
  for (; i + K <= hw; i += K)
    for (int k = 0; k < K; ++k) s[k] = s[k] + simd::load(xt + (i + k) * B);
  if (i < hw) s[0] = s[0] + simd::load(xt + i * B);
  for (int k = 1; k < K; ++k) s[0] = s[0] + s[k];
  return s[0];
}

// Sum of a plain row: f32 the compiler's omp simd reduction, bf16 one
// 16-lane accumulator (the tail masked) summed across by simd::hsum.
using simd::row_sum;
#if MEMFIT_BF16_SIMD
float row_sum(const bf16_t* r, int64_t hw) {
  __m512 s = _mm512_setzero_ps();
  for (int64_t i = 0; i < hw; i += simd::kLanes) s = _mm512_add_ps(s, simd::load(r + i, simd::lanes(hw - i)));
  return simd::hsum(s);
}
#endif
float row_sum(const float* r, int64_t hw) { return row_sum(r, hw, [](float x) { return x; }); }

// in: x  out: y = mean of each (n, c)'s HW values
template <class T>
class GlobalAvgPool final : public GlobalPool<T> {
 public:
  using GlobalPool<T>::GlobalPool;
  const char* name() const override { return this->name_of(false); }
  void run(const StepContext&) override {
    constexpr int64_t B = kChannelBlock;
    const T* x = this->template in<T>(0);
    T* y = this->template out<T>(0);
    const int64_t hw = this->p_.HW;
    const float count = static_cast<float>(hw);
    if (this->blocked_) {
      const simd::V vc = simd::set1(count);
      return this->for_each([&](int64_t t) { simd::store(y + t * B, tile_sum(x + t * hw * B, hw) / vc); });
    }
    this->for_each([&](int64_t r) { y[r] = simd::from_f32<T>(row_sum(x + r * hw, hw) / count); });
  }
};

// in: dy  out: dx = dy / HW (rounded once) broadcast over each (n, c)'s HW positions
template <class T>
class GlobalAvgPoolBwd final : public GlobalPool<T> {
 public:
  using GlobalPool<T>::GlobalPool;
  const char* name() const override { return this->name_of(true); }
  void run(const StepContext&) override {
    constexpr int64_t B = kChannelBlock;
    const T* dy = this->template in<T>(0);
    T* dx = this->template out<T>(0);
    const int64_t hw = this->p_.HW;
    const float count = static_cast<float>(hw);
    if (this->blocked_) {
      const simd::V vc = simd::set1(count);
      return this->for_each([&](int64_t t) {
        T g[B];
        simd::store(g, simd::load(dy + t * B) / vc);
        T* dt = dx + t * hw * B;
        for (int64_t i = 0; i < hw; ++i) std::memcpy(dt + i * B, g, sizeof g);
      });
    }
    this->for_each([&](int64_t r) { std::fill_n(dx + r * hw, hw, simd::from_f32<T>(simd::to_f32(dy[r]) / count)); });
  }
};

template <class K>
std::unique_ptr<Kernel> try_pool(const PoolParams& p, algorithm alg, ElemType act) {
  try {
    return std::make_unique<K>(p, alg, act);
  } catch (const dnnl::error&) {
    return nullptr;
  } catch (const Unsupported&) {
    return nullptr;
  }
}

}  // namespace

std::unique_ptr<Kernel> make_max_pool2d(const PoolParams& p, ElemType act) {
  return try_pool<PoolFwd>(p, algorithm::pooling_max, act);
}
std::unique_ptr<Kernel> make_max_pool2d_bwd(const PoolParams& p, ElemType act) {
  return try_pool<PoolBwd>(p, algorithm::pooling_max, act);
}
std::unique_ptr<Kernel> make_avg_pool2d(const PoolParams& p, ElemType act) {
  return try_pool<PoolFwd>(p, avg_alg(p), act);
}
std::unique_ptr<Kernel> make_avg_pool2d_bwd(const PoolParams& p, ElemType act) {
  return try_pool<PoolBwd>(p, avg_alg(p), act);
}
std::unique_ptr<Kernel> make_global_avg_pool(const GlobalPoolParams& p, Layout x, ElemType act) {
  if (x == Layout::Blocked16 && p.C % kChannelBlock) return nullptr;
  return simd::make_for<GlobalAvgPool>(act, p, x);
}
std::unique_ptr<Kernel> make_global_avg_pool_bwd(const GlobalPoolParams& p, Layout dx, ElemType act) {
  if (dx == Layout::Blocked16 && p.C % kChannelBlock) return nullptr;
  return simd::make_for<GlobalAvgPoolBwd>(act, p, dx);
}

}  // namespace memfit::kernels::cpu
