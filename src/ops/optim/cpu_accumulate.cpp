// Accumulation into a bf16 gradient fused into the op that makes the
// micro-batch's gradient (params.hpp's AccumulateMatmulParams and
// AccumulateRowsParams): the f32 gradient is never held whole.
//
// grad_accumulate_matmul: the product is computed a panel of output rows at a
// time (oneDNN, into the kernel's scratch: about kAccumulatePanelBytes),
// each panel added into its rows of the accumulator and rounded before the
// next is computed. The panels' products are the ones a whole matmul makes
// up to oneDNN's order of summation over the contracted axis, so the
// reference (which sums in that axis's order) and this kernel may differ by
// the f32 rounding of that sum before the stochastic rounding to bf16.
//
// grad_accumulate_rows: the valid (id, position) pairs sorted in the
// kernel's scratch (n 8-byte keys), each id's rows summed in f32 in the
// order of their positions and added once: the reference's sums exactly, so
// the two store the same bytes.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/dnnl_util.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/optim_state.hpp"
#include "ops/optim/cpu.hpp"

namespace memfit::kernels::cpu {
namespace {

constexpr int64_t kChunk = 4096;  // elements per thread task when rounding

class GradAccumulateMatmul final : public Kernel {
 public:
  GradAccumulateMatmul(const AccumulateMatmulParams& p, size_t panel_bytes) : p_(p) {
    const int64_t M = p.M, N = p.N, K = p.K;
    if (M < 1 || N < 1 || K < 1) throw Unsupported{};
    const int64_t by_bytes = static_cast<int64_t>(panel_bytes / (4 * static_cast<size_t>(N))) / 16 * 16;
    panel_ = std::min(M, std::max<int64_t>(16, by_bytes));
    const dnnl::memory::desc b = p.trans_b ? strided_f32({K, N}, {1, K}) : plain_f32({K, N});
    auto make = [&](int64_t r) {
      Prim pr;
      pr.rows = r;
      pr.a = p.trans_a ? strided_f32({r, K}, {1, M}) : plain_f32({r, K});
      pr.b = b;
      pr.c = plain_f32({r, N});
      pr.pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(pr.a, pr.b, pr.c), user_scratchpad_attr(), engine());
      scratchpad_ = std::max(scratchpad_, scratchpad_bytes(pr.pd));
      heap_ = std::max(heap_, matmul_heap_bytes(pr.pd, r, N, K));
      return pr;
    };
    for (int64_t r0 = 0; r0 < M; r0 += panel_) {
      const int64_t r = std::min(panel_, M - r0);
      size_t which = prims_.size();
      for (size_t i = 0; i < prims_.size(); ++i)
        if (prims_[i].rows == r) which = i;
      if (which == prims_.size()) prims_.push_back(make(r));
      panels_.push_back({r0, r, which, Call{}});
    }
    ScratchLayout l;
    product_at_ = l.add(static_cast<size_t>(panel_ * N) * sizeof(float));
    pad_at_ = l.add(scratchpad_);
    total_ = l.total();
  }
  const char* name() const override { return "dnnl.grad_accumulate_matmul"; }
  size_t scratch_bytes() const override { return total_; }
  size_t heap_bytes() const override { return heap_; }
  void run(const StepContext& ctx) override {
    bf16_t* acc = in<bf16_t>(0);
    const float* prod = reinterpret_cast<const float*>(static_cast<std::byte*>(scratch_) + product_at_);
    const bool first = p_.first && ctx.micro == 0;
    const uint64_t key = qstate::grad_rounding_key(ctx.seed, ctx.step, ctx.micro, p_.param, p_.part);
    for (const Panel& pn : panels_) {
      pn.call.run();
      const int64_t n = pn.rows * p_.N, at = pn.row0 * p_.N;
      parallel_for((n + kChunk - 1) / kChunk, n, [&](int64_t c) {
        const int64_t i0 = c * kChunk, i1 = std::min(n, i0 + kChunk);
        qstate::accumulate_bf16_slice(acc, prod + i0, at + i0, at + i1, first, key);
      });
    }
  }

 private:
  struct Prim {
    int64_t rows = 0;
    dnnl::memory::desc a, b, c;
    dnnl::matmul::primitive_desc pd;
  };
  struct Panel {
    int64_t row0, rows;
    size_t prim;
    Call call;
  };
  void on_bind() override {
    const float* a = in<float>(1);
    const float* b = in<float>(2);
    std::byte* s = static_cast<std::byte*>(scratch_);
    for (Panel& pn : panels_) {
      const Prim& pr = prims_[pn.prim];
      pn.call.set(dnnl::matmul(pr.pd));
      // Rows [row0, row0 + rows) of op(a): columns of a stored [K, M].
      const float* ap = p_.trans_a ? a + pn.row0 : a + pn.row0 * p_.K;
      pn.call.arg(DNNL_ARG_SRC, pr.a, const_cast<float*>(ap));
      pn.call.arg(DNNL_ARG_WEIGHTS, pr.b, const_cast<float*>(b));
      pn.call.arg(DNNL_ARG_DST, pr.c, s + product_at_);
      pn.call.arg(DNNL_ARG_SCRATCHPAD, pr.pd.scratchpad_desc(), s + pad_at_);
    }
  }
  AccumulateMatmulParams p_;
  int64_t panel_ = 0;
  std::vector<Prim> prims_;
  std::vector<Panel> panels_;
  size_t scratchpad_ = 0, heap_ = 0, product_at_ = 0, pad_at_ = 0, total_ = 0;
};

class GradAccumulateRows final : public Kernel {
 public:
  explicit GradAccumulateRows(AccumulateRowsParams p) : p_(std::move(p)) {}
  const char* name() const override { return "cpu.grad_accumulate_rows"; }
  size_t scratch_bytes() const override { return static_cast<size_t>(p_.n) * sizeof(uint64_t); }
  void run(const StepContext& ctx) override {
    bf16_t* acc = in<bf16_t>(0);
    const int32_t* ids = in<int32_t>(1);
    const float* dy = in<float>(2);
    const int64_t D = p_.D, total = p_.V * D;
    if (p_.first && ctx.micro == 0)
      parallel_for((total + (kChunk << 4) - 1) / (kChunk << 4), total, [&](int64_t c) {
        const int64_t i0 = c * (kChunk << 4), i1 = std::min(total, i0 + (kChunk << 4));
        std::memset(acc + i0, 0, static_cast<size_t>(i1 - i0) * sizeof(bf16_t));
      });
    // (id, position) of each valid id, sorted: an id's rows are adjacent,
    // in the order of their positions.
    uint64_t* keys = static_cast<uint64_t*>(scratch_);
    int64_t m = 0;
    for (int64_t i = 0; i < p_.n; ++i)
      if (ids[i] >= 0 && ids[i] < p_.V) keys[m++] = (static_cast<uint64_t>(ids[i]) << 32) | static_cast<uint64_t>(i);
    std::sort(keys, keys + m);
    const uint64_t key = qstate::grad_rounding_key(ctx.seed, ctx.step, ctx.micro, p_.param, p_.part);
    auto id_at = [&](int64_t k) { return static_cast<int64_t>(keys[k] >> 32); };
    // Task c adds the ids whose first entry lies in [c S, (c + 1) S).
    constexpr int64_t S = 64;
    parallel_for((m + S - 1) / S, m * D, [&](int64_t c) {
      int64_t k = c * S;
      while (k > 0 && k < m && id_at(k) == id_at(k - 1)) ++k;
      constexpr int64_t W = 16;
      float s[W];
      while (k < std::min(m, (c + 1) * S)) {
        const int64_t id = id_at(k);
        int64_t e = k + 1;
        while (e < m && id_at(e) == id) ++e;
        for (int64_t j0 = 0; j0 < D; j0 += W) {
          const int64_t w = std::min(W, D - j0);
          for (int64_t t = 0; t < w; ++t) s[t] = 0.0f;
          for (int64_t q = k; q < e; ++q) {
            const float* row = dy + static_cast<int64_t>(keys[q] & 0xffffffffu) * D + j0;
            for (int64_t t = 0; t < w; ++t) s[t] += row[t];
          }
          qstate::accumulate_bf16_slice(acc, s, id * D + j0, id * D + j0 + w, false, key);
        }
        k = e;
      }
    });
  }

 private:
  AccumulateRowsParams p_;
};

}  // namespace

std::unique_ptr<Kernel> make_grad_accumulate_matmul(const AccumulateMatmulParams& p, size_t panel_bytes) {
  return try_make<GradAccumulateMatmul, Kernel>(p, panel_bytes);
}
std::unique_ptr<Kernel> make_grad_accumulate_rows(const AccumulateRowsParams& p) {
  if (p.V < 1 || p.D < 1 || p.n < 0 || p.V > (int64_t(1) << 31)) return nullptr;
  return std::make_unique<GradAccumulateRows>(p);
}

}  // namespace memfit::kernels::cpu
