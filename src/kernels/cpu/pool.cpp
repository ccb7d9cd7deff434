// N batch, C channels, H/W input size, R/S window, OH/OW output size.
//
// Padding is symmetric (pad_l = pad_r = pad), so oneDNN's output size is the
// graph's floor((H + 2 pad - R) / stride) + 1 and every window lies inside
// the padded input: "include padding" divides by R*S, as the graph's
// count_include_pad does; "exclude padding" by the valid elements.
//
// bf16 (act = BF16): max/avg pooling are oneDNN's bf16 pooling primitives on
// NCHW bf16 data; global average pooling is an AVX-512 loop (f32 sums, one
// rounding of the mean; the backward rounds dy / HW once).
#include "kernels/cpu/pool.hpp"

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
  const dims strides{p.stride_h, p.stride_w}, kernel{p.R, p.S}, pad{p.pad_h, p.pad_w};
  dnnl::pooling_forward::desc fd(prop_kind::forward_training, alg, d.x, d.y, strides, kernel, pad, pad);
  d.fwd = {fd, user_scratchpad_attr(), engine()};
  dnnl::pooling_backward::desc bd(alg, d.x, d.y, strides, kernel, pad, pad);
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

// Plain: rows of HW elements, one per (n, c). Blocked16: tiles of HW x 16,
// one per (n, channel block), the channels in the vector lanes.
class GlobalAvgPool final : public Kernel {
 public:
  GlobalAvgPool(const GlobalPoolParams& p, Layout l) : p_(p), blocked_(l == Layout::Blocked16) {}
  const char* name() const override { return blocked_ ? "cpu.global_avg_pool.blk16" : "cpu.global_avg_pool"; }
  void run(const StepContext&) override {
    const float* x = in<float>(0);
    float* y = out<float>(0);
    const int64_t rows = p_.N * p_.C, hw = p_.HW;
    const float count = static_cast<float>(hw);
    if (blocked_) {
      constexpr int64_t B = kChannelBlock;
      parallel_for(rows / B, rows * hw, [&](int64_t t) {
        const float* xt = x + t * hw * B;
        float s[B] = {};
        for (int64_t i = 0; i < hw; ++i) {
#pragma omp simd
          for (int64_t j = 0; j < B; ++j) s[j] += xt[i * B + j];
        }
        for (int64_t j = 0; j < B; ++j) y[t * B + j] = s[j] / count;
      });
      return;
    }
    parallel_for(rows, rows * hw, [&](int64_t r) {
      const float* xr = x + r * hw;
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < hw; ++i) s += xr[i];
      y[r] = s / count;
    });
  }

 private:
  GlobalPoolParams p_;
  bool blocked_;
};

class GlobalAvgPoolBwd final : public Kernel {
 public:
  GlobalAvgPoolBwd(const GlobalPoolParams& p, Layout l) : p_(p), blocked_(l == Layout::Blocked16) {}
  const char* name() const override { return blocked_ ? "cpu.global_avg_pool_bwd.blk16" : "cpu.global_avg_pool_bwd"; }
  void run(const StepContext&) override {
    const float* dy = in<float>(0);
    float* dx = out<float>(0);
    const int64_t rows = p_.N * p_.C, hw = p_.HW;
    const float count = static_cast<float>(hw);
    if (blocked_) {
      constexpr int64_t B = kChannelBlock;
      parallel_for(rows / B, rows * hw, [&](int64_t t) {
        float g[B];
        for (int64_t j = 0; j < B; ++j) g[j] = dy[t * B + j] / count;
        float* dt = dx + t * hw * B;
        for (int64_t i = 0; i < hw; ++i) {
#pragma omp simd
          for (int64_t j = 0; j < B; ++j) dt[i * B + j] = g[j];
        }
      });
      return;
    }
    parallel_for(rows, rows * hw, [&](int64_t r) {
      const float g = dy[r] / count;
      float* dxr = dx + r * hw;
#pragma omp simd
      for (int64_t i = 0; i < hw; ++i) dxr[i] = g;
    });
  }

 private:
  GlobalPoolParams p_;
  bool blocked_;
};

#if MEMFIT_BF16_SIMD

// bf16 global average pooling. Plain: one row of HW values per (n, c),
// summed in f32 lanes then across them; Blocked16: HW x 16 tiles, the
// sixteen channels in the lanes. y = round_bf16(sum / HW).
class GlobalAvgPoolBf16 final : public Kernel {
 public:
  GlobalAvgPoolBf16(const GlobalPoolParams& p, Layout l) : p_(p), blocked_(l == Layout::Blocked16) {}
  const char* name() const override {
    return blocked_ ? "cpu.global_avg_pool.blk16.bf16" : "cpu.global_avg_pool.bf16";
  }
  void run(const StepContext&) override {
    const bf16_t* x = in<bf16_t>(0);
    bf16_t* y = out<bf16_t>(0);
    const int64_t rows = p_.N * p_.C, hw = p_.HW;
    const float count = static_cast<float>(hw);
    if (blocked_) {
      constexpr int64_t B = kChannelBlock;
      const __m512 vc = _mm512_set1_ps(count);
      parallel_for(rows / B, rows * hw, [&](int64_t t) {
        const bf16_t* xt = x + t * hw * B;
        __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
        int64_t i = 0;
        for (; i + 2 <= hw; i += 2) {
          s0 = _mm512_add_ps(s0, simd::load(xt + i * B));
          s1 = _mm512_add_ps(s1, simd::load(xt + (i + 1) * B));
        }
        if (i < hw) s0 = _mm512_add_ps(s0, simd::load(xt + i * B));
        simd::store(y + t * B, _mm512_div_ps(_mm512_add_ps(s0, s1), vc));
      });
      return;
    }
    parallel_for(rows, rows * hw, [&](int64_t r) {
      const bf16_t* xr = x + r * hw;
      __m512 s = _mm512_setzero_ps();
      for (int64_t i = 0; i < hw; i += simd::kLanes) s = _mm512_add_ps(s, simd::load(xr + i, simd::lanes(hw - i)));
      y[r] = f32_to_bf16(simd::hsum(s) / count);
    });
  }

 private:
  GlobalPoolParams p_;
  bool blocked_;
};

// dx = round_bf16(dy / HW) broadcast over each (n, c)'s HW positions.
class GlobalAvgPoolBwdBf16 final : public Kernel {
 public:
  GlobalAvgPoolBwdBf16(const GlobalPoolParams& p, Layout l) : p_(p), blocked_(l == Layout::Blocked16) {}
  const char* name() const override {
    return blocked_ ? "cpu.global_avg_pool_bwd.blk16.bf16" : "cpu.global_avg_pool_bwd.bf16";
  }
  void run(const StepContext&) override {
    const bf16_t* dy = in<bf16_t>(0);
    bf16_t* dx = out<bf16_t>(0);
    const int64_t rows = p_.N * p_.C, hw = p_.HW;
    const float count = static_cast<float>(hw);
    if (blocked_) {
      constexpr int64_t B = kChannelBlock;
      const __m512 vc = _mm512_set1_ps(count);
      parallel_for(rows / B, rows * hw, [&](int64_t t) {
        const __m256i g = simd::narrow(_mm512_div_ps(simd::load(dy + t * B), vc));
        bf16_t* dt = dx + t * hw * B;
        for (int64_t i = 0; i < hw; ++i) _mm256_storeu_si256(reinterpret_cast<__m256i*>(dt + i * B), g);
      });
      return;
    }
    parallel_for(rows, rows * hw, [&](int64_t r) {
      const __m256i g = _mm256_set1_epi16(static_cast<short>(f32_to_bf16(bf16_to_f32(dy[r]) / count)));
      bf16_t* dxr = dx + r * hw;
      for (int64_t i = 0; i < hw; i += simd::kLanes) _mm256_mask_storeu_epi16(dxr + i, simd::lanes(hw - i), g);
    });
  }

 private:
  GlobalPoolParams p_;
  bool blocked_;
};

#endif

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
#if MEMFIT_BF16_SIMD
  if (act == ElemType::BF16) return std::make_unique<GlobalAvgPoolBf16>(p, x);
#endif
  return act == ElemType::F32 ? std::make_unique<GlobalAvgPool>(p, x) : nullptr;
}
std::unique_ptr<Kernel> make_global_avg_pool_bwd(const GlobalPoolParams& p, Layout dx, ElemType act) {
  if (dx == Layout::Blocked16 && p.C % kChannelBlock) return nullptr;
#if MEMFIT_BF16_SIMD
  if (act == ElemType::BF16) return std::make_unique<GlobalAvgPoolBwdBf16>(p, dx);
#endif
  return act == ElemType::F32 ? std::make_unique<GlobalAvgPoolBwd>(p, dx) : nullptr;
}

}  // namespace memfit::kernels::cpu
