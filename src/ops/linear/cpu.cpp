// M rows, K input features, N output features (linear: y[M,N] = x[M,K] w[N,K]^T + b).
// matmul: B batch, c[B,M,N] = op(a) op(b); a transposed operand is described
// to oneDNN by its strides, a broadcast one by a batch extent of 1.
//
// bf16 activations (act = BF16): x, y, dy, dx bf16. oneDNN's bf16 matmul takes
// bf16 weights only, so the forward and backward-data kernels first round
// the graph's f32 w into a bf16 copy in their scratch (after the matmul's
// scratchpad), threaded; the bias is passed as f32. Backward-weights writes
// f32 dw (f32 accumulation of exact bf16 products) and sums db in f32 from
// the bf16 dy.
#include "ops/linear/cpu.hpp"

#include <algorithm>
#include <cstddef>

#include "kernels/bf16.hpp"
#include "kernels/cpu/bf16_simd.hpp"
#include "kernels/cpu/dnnl_util.hpp"
#include "kernels/cpu/parallel.hpp"

namespace memfit::kernels::cpu {
namespace {

using dt = dnnl::memory::data_type;

bool is_bf16(ElemType act) {
  if (act != ElemType::F32 && act != ElemType::BF16) throw Unsupported{};
  return act == ElemType::BF16;
}

// Dense row-major, or explicitly strided, tensor of type t.
dnnl::memory::desc plain_of(const dims& d, dt t) {
  if (t == dt::f32) return plain_f32(d);
  dims st(d.size());
  dnnl::memory::dim s = 1;
  for (size_t i = d.size(); i-- > 0;) {
    st[i] = s;
    s *= d[i];
  }
  return dnnl::memory::desc(d, t, st);
}
dnnl::memory::desc strided_of(const dims& d, const dims& strides, dt t) {
  return t == dt::f32 ? strided_f32(d, strides) : dnnl::memory::desc(d, t, strides);
}

// out[0, n) = in rounded to bf16, split across threads in chunks.
void round_weights(const float* in, bf16_t* out, int64_t n) {
  constexpr int64_t kChunk = 4096;
  parallel_for((n + kChunk - 1) / kChunk, n, [&](int64_t c) {
    const int64_t i0 = c * kChunk;
    f32_to_bf16(in + i0, out + i0, static_cast<size_t>(std::min(kChunk, n - i0)));
  });
}

// Scratch of a kernel that rounds its weights: [matmul scratchpad][bf16 w].
struct WeightCopy {
  size_t offset = 0, total = 0;
  void plan(size_t scratchpad, int64_t n, bool on) {
    ScratchLayout l;
    l.add(scratchpad);
    offset = on ? l.add(static_cast<size_t>(n) * sizeof(bf16_t)) : 0;
    total = l.total();
  }
  bf16_t* at(void* scratch) const { return reinterpret_cast<bf16_t*>(static_cast<std::byte*>(scratch) + offset); }
};

// The three linear kernels are oneDNN matmuls (brgemm), not inner
// products: the inner product's gemm implementation allocates its packing
// buffers on the heap at every call (megabytes at batch 256), outside the
// plan, while the brgemm matmul keeps all of its buffers in the planned
// scratchpad. brgemm needs AVX-512: elsewhere the matmul is that same gemm
// ("gemm:jit"), and each kernel declares its heap bound (heap_bytes) for
// the plan to count.
// w is [N, K] row-major; w^T and dy^T are described by their strides.

// in: x, w, (b)  out: y = x w^T (+ b)
class LinearFwd final : public Kernel {
 public:
  LinearFwd(const LinearParams& p, ElemType act, bool bf16_weights)
      : p_(p),
        bf16_(is_bf16(act)),
        round_(bf16_ && !bf16_weights),
        x_(plain_of({p.M, p.K}, bf16_ ? dt::bf16 : dt::f32)),
        wt_(strided_of({p.K, p.N}, {1, p.K}, bf16_ ? dt::bf16 : dt::f32)),
        b_(p.bias ? plain_f32({1, p.N}) : dnnl::memory::desc()),
        y_(plain_of({p.M, p.N}, bf16_ ? dt::bf16 : dt::f32)) {
    dnnl::matmul::desc desc(x_, wt_, b_, y_);
    pd_ = {desc, user_scratchpad_attr(), engine()};
    call_.set(dnnl::matmul(pd_));
    wcopy_.plan(scratchpad_bytes(pd_), p.N * p.K, round_);
    heap_ = matmul_heap_bytes(pd_, p.M, p.N, p.K);
  }
  const char* name() const override { return bf16_ ? "dnnl.linear.bf16" : "dnnl.linear"; }
  size_t heap_bytes() const override { return heap_; }
  size_t scratch_bytes() const override { return wcopy_.total; }
  void run(const StepContext&) override {
    if (round_) round_weights(in<float>(1), wcopy_.at(scratch_), p_.N * p_.K);
    call_.run();
  }

 private:
  void on_bind() override {
    call_.clear_args();
    call_.arg(DNNL_ARG_SRC, x_, in_[0]);
    call_.arg(DNNL_ARG_WEIGHTS, wt_, round_ ? static_cast<void*>(wcopy_.at(scratch_)) : in_[1]);
    if (p_.bias) call_.arg(DNNL_ARG_BIAS, b_, in_[2]);
    call_.arg(DNNL_ARG_DST, y_, out_[0]);
    call_.arg(DNNL_ARG_SCRATCHPAD, pd_.scratchpad_desc(), scratch_);
  }
  LinearParams p_;
  bool bf16_, round_;  // round_: w is f32, rounded into the scratch's copy
  dnnl::memory::desc x_, wt_, b_, y_;
  dnnl::matmul::primitive_desc pd_;
  WeightCopy wcopy_;
  size_t heap_ = 0;
  Call call_;
};

// in: dy, w  out: dx = dy w
class LinearBwdData final : public Kernel {
 public:
  LinearBwdData(const LinearParams& p, ElemType act, bool bf16_weights)
      : nw_(p.N * p.K),
        bf16_(is_bf16(act)),
        round_(bf16_ && !bf16_weights),
        dy_(plain_of({p.M, p.N}, bf16_ ? dt::bf16 : dt::f32)),
        w_(plain_of({p.N, p.K}, bf16_ ? dt::bf16 : dt::f32)),
        dx_(plain_of({p.M, p.K}, bf16_ ? dt::bf16 : dt::f32)) {
    dnnl::matmul::desc desc(dy_, w_, dx_);
    pd_ = {desc, user_scratchpad_attr(), engine()};
    call_.set(dnnl::matmul(pd_));
    wcopy_.plan(scratchpad_bytes(pd_), nw_, round_);
    heap_ = matmul_heap_bytes(pd_, p.M, p.K, p.N);
  }
  size_t heap_bytes() const override { return heap_; }
  const char* name() const override { return bf16_ ? "dnnl.linear_bwd_data.bf16" : "dnnl.linear_bwd_data"; }
  size_t scratch_bytes() const override { return wcopy_.total; }
  void run(const StepContext&) override {
    if (round_) round_weights(in<float>(1), wcopy_.at(scratch_), nw_);
    call_.run();
  }

 private:
  void on_bind() override {
    call_.clear_args();
    call_.arg(DNNL_ARG_SRC, dy_, in_[0]);
    call_.arg(DNNL_ARG_WEIGHTS, w_, round_ ? static_cast<void*>(wcopy_.at(scratch_)) : in_[1]);
    call_.arg(DNNL_ARG_DST, dx_, out_[0]);
    call_.arg(DNNL_ARG_SCRATCHPAD, pd_.scratchpad_desc(), scratch_);
  }
  int64_t nw_;
  bool bf16_, round_;
  dnnl::memory::desc dy_, w_, dx_;
  dnnl::matmul::primitive_desc pd_;
  WeightCopy wcopy_;
  size_t heap_ = 0;
  Call call_;
};

// in: x, dy  out: dw = dy^T x, (db = column sums of dy)
class LinearBwdWeight final : public Kernel {
 public:
  LinearBwdWeight(const LinearParams& p, ElemType act)
      : p_(p),
        bf16_(is_bf16(act)),
        dyt_(strided_of({p.N, p.M}, {1, p.N}, bf16_ ? dt::bf16 : dt::f32)),
        x_(plain_of({p.M, p.K}, bf16_ ? dt::bf16 : dt::f32)),
        dw_(plain_f32({p.N, p.K})) {
    dnnl::matmul::desc desc(dyt_, x_, dw_);
    pd_ = {desc, user_scratchpad_attr(), engine()};
    call_.set(dnnl::matmul(pd_));
    heap_ = matmul_heap_bytes(pd_, p.N, p.K, p.M);
  }
  size_t heap_bytes() const override { return heap_; }
  const char* name() const override { return bf16_ ? "dnnl.linear_bwd_weight.bf16" : "dnnl.linear_bwd_weight"; }
  size_t scratch_bytes() const override { return scratchpad_bytes(pd_); }
  void run(const StepContext&) override {
    call_.run();
    if (!p_.bias) return;
    if (bf16_) return bias(in<bf16_t>(1));
    bias(in<float>(1));
  }

 private:
  // db = column sums of dy (f32 or bf16), in f32 row by row.
  template <class T>
  void bias(const T* dy) {
    float* db = out<float>(1);
    const int64_t M = p_.M, N = p_.N;
    for (int64_t n = 0; n < N; ++n) db[n] = 0.0f;
    for (int64_t m = 0; m < M; ++m) {
      const T* row = dy + m * N;
#pragma omp simd
      for (int64_t n = 0; n < N; ++n) db[n] += simd::to_f32(row[n]);
    }
  }
  void on_bind() override {
    call_.clear_args();
    call_.arg(DNNL_ARG_SRC, dyt_, in_[1]);
    call_.arg(DNNL_ARG_WEIGHTS, x_, in_[0]);
    call_.arg(DNNL_ARG_DST, dw_, out_[0]);
    call_.arg(DNNL_ARG_SCRATCHPAD, pd_.scratchpad_desc(), scratch_);
  }
  LinearParams p_;
  bool bf16_;
  dnnl::memory::desc dyt_, x_, dw_;
  dnnl::matmul::primitive_desc pd_;
  size_t heap_ = 0;
  Call call_;
};

class Matmul final : public Kernel {
 public:
  explicit Matmul(const MatmulParams& p) {
    const int64_t ba = p.a_batch ? p.a_batch : p.B, bb = p.b_batch ? p.b_batch : p.B;
    const int64_t M = p.M, N = p.N, K = p.K;
    // a holds [ba, M, K], or [ba, K, M] when transposed; likewise b.
    a_ = p.trans_a ? strided_f32({ba, M, K}, {M * K, 1, M}) : plain_f32({ba, M, K});
    b_ = p.trans_b ? strided_f32({bb, K, N}, {K * N, 1, K}) : plain_f32({bb, K, N});
    c_ = plain_f32({p.B, M, N});
    dnnl::matmul::desc desc(a_, b_, c_);
    pd_ = {desc, user_scratchpad_attr(), engine()};
    call_.set(dnnl::matmul(pd_));
    heap_ = matmul_heap_bytes(pd_, M, N, K, p.B);
  }
  size_t heap_bytes() const override { return heap_; }
  const char* name() const override { return "dnnl.matmul"; }
  size_t scratch_bytes() const override { return scratchpad_bytes(pd_); }
  void run(const StepContext&) override { call_.run(); }

 private:
  void on_bind() override {
    call_.clear_args();
    call_.arg(DNNL_ARG_SRC, a_, in_[0]);
    call_.arg(DNNL_ARG_WEIGHTS, b_, in_[1]);
    call_.arg(DNNL_ARG_DST, c_, out_[0]);
    call_.arg(DNNL_ARG_SCRATCHPAD, pd_.scratchpad_desc(), scratch_);
  }
  dnnl::memory::desc a_, b_, c_;
  dnnl::matmul::primitive_desc pd_;
  size_t heap_ = 0;
  Call call_;
};

class MatmulBf16B final : public Kernel {
 public:
  MatmulBf16B(const MatmulParams& p, size_t panel_bytes) {
    if ((p.b_batch ? p.b_batch : p.B) != 1 || (p.a_batch ? p.a_batch : p.B) != p.B) throw Unsupported{};
    if (p.trans_a && p.B != 1) throw Unsupported{};
    by_columns_ = p.trans_b;
    M_ = p.B * p.M;  // a's batch folded into its rows (plain a)
    N_ = p.N;
    K_ = p.K;
    // b's stored rows and their length.
    rows_ = by_columns_ ? N_ : K_;
    other_ = by_columns_ ? K_ : N_;
    panel_ = std::min(rows_, std::max<int64_t>(64, static_cast<int64_t>(panel_bytes / (4 * static_cast<size_t>(other_))) / 64 * 64));
    trans_a_ = p.trans_a;
    auto make = [&](int64_t r, bool sum) {
      dnnl::memory::desc a, w, c;
      if (by_columns_) {
        a = trans_a_ ? strided_f32({M_, K_}, {1, M_}) : plain_f32({M_, K_});
        w = strided_f32({K_, r}, {1, K_});
        c = strided_f32({M_, r}, {N_, 1});
      } else {
        a = trans_a_ ? strided_f32({M_, r}, {1, M_}) : strided_f32({M_, r}, {K_, 1});
        w = plain_f32({r, N_});
        c = plain_f32({M_, N_});
      }
      dnnl::primitive_attr attr = user_scratchpad_attr();
      if (sum) {
        dnnl::post_ops po;
        po.append_sum(1.0f);
        attr.set_post_ops(po);
      }
      Prim pr;
      pr.a = a;
      pr.w = w;
      pr.c = c;
      pr.pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, w, c), attr, engine());
      pr.prim = dnnl::matmul(pr.pd);
      scratchpad_ = std::max(scratchpad_, scratchpad_bytes(pr.pd));
      heap_ = std::max(heap_, matmul_heap_bytes(pr.pd, M_, by_columns_ ? r : N_, by_columns_ ? K_ : r));
      return pr;
    };
    for (int64_t r0 = 0; r0 < rows_; r0 += panel_) {
      const int64_t r = std::min(panel_, rows_ - r0);
      const bool sum = !by_columns_ && r0 > 0;
      size_t which = prims_.size();
      for (size_t i = 0; i < prims_.size(); ++i)
        if (prims_[i].rows == r && prims_[i].sum == sum) which = i;
      if (which == prims_.size()) {
        prims_.push_back(make(r, sum));
        prims_.back().rows = r;
        prims_.back().sum = sum;
      }
      panels_.push_back({r0, r, which, Call{}});
    }
    ScratchLayout l;
    wide_at_ = l.add(static_cast<size_t>(panel_ * other_) * sizeof(float));
    pad_at_ = l.add(scratchpad_);
    total_ = l.total();
  }
  const char* name() const override { return "dnnl.matmul.bf16_b_panels"; }
  size_t scratch_bytes() const override { return total_; }
  size_t heap_bytes() const override { return heap_; }
  void run(const StepContext&) override {
    const bf16_t* b = in<bf16_t>(1);
    float* wide = reinterpret_cast<float*>(static_cast<std::byte*>(scratch_) + wide_at_);
    constexpr int64_t kChunk = 4096;
    for (const Panel& pn : panels_) {
      const int64_t n = pn.rows * other_;
      const bf16_t* src = b + pn.row0 * other_;
      parallel_for((n + kChunk - 1) / kChunk, n, [&](int64_t c) {
        const int64_t i0 = c * kChunk;
        bf16_to_f32(src + i0, wide + i0, static_cast<size_t>(std::min(kChunk, n - i0)));
      });
      pn.call.run();
    }
  }

 private:
  struct Prim {
    dnnl::memory::desc a, w, c;
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul prim;
    int64_t rows = 0;
    bool sum = false;
  };
  struct Panel {
    int64_t row0, rows;
    size_t prim;
    Call call;
  };
  void on_bind() override {
    float* a = in<float>(0);
    float* c = out<float>(0);
    std::byte* s = static_cast<std::byte*>(scratch_);
    for (Panel& pn : panels_) {
      const Prim& pr = prims_[pn.prim];
      pn.call.set(pr.prim);
      float* ap = a;
      float* cp = c;
      if (by_columns_) cp = c + pn.row0;  // columns [row0, row0 + rows) of c
      else ap = trans_a_ ? a + pn.row0 * M_ : a + pn.row0;  // the reduction's slice of op(a)
      pn.call.arg(DNNL_ARG_SRC, pr.a, ap);
      pn.call.arg(DNNL_ARG_WEIGHTS, pr.w, s + wide_at_);
      pn.call.arg(DNNL_ARG_DST, pr.c, cp);
      pn.call.arg(DNNL_ARG_SCRATCHPAD, pr.pd.scratchpad_desc(), s + pad_at_);
    }
  }
  bool by_columns_ = false, trans_a_ = false;
  int64_t M_ = 0, N_ = 0, K_ = 0, rows_ = 0, other_ = 0, panel_ = 0;
  std::vector<Prim> prims_;
  std::vector<Panel> panels_;
  size_t scratchpad_ = 0, heap_ = 0, wide_at_ = 0, pad_at_ = 0, total_ = 0;
};

}  // namespace

std::unique_ptr<Kernel> make_matmul_bf16_b(const MatmulParams& p, size_t panel_bytes) {
  return try_make<MatmulBf16B, Kernel>(p, panel_bytes);
}

std::unique_ptr<Kernel> make_linear(const LinearParams& p, ElemType act, bool bf16_weights) {
  if (bf16_weights && act != ElemType::BF16) return nullptr;
  return try_make<LinearFwd, Kernel>(p, act, bf16_weights);
}
std::unique_ptr<Kernel> make_linear_bwd_data(const LinearParams& p, ElemType act, bool bf16_weights) {
  if (bf16_weights && act != ElemType::BF16) return nullptr;
  return try_make<LinearBwdData, Kernel>(p, act, bf16_weights);
}
std::unique_ptr<Kernel> make_linear_bwd_weight(const LinearParams& p, ElemType act) {
  return try_make<LinearBwdWeight, Kernel>(p, act);
}
std::unique_ptr<Kernel> make_matmul(const MatmulParams& p) { return try_make<Matmul, Kernel>(p); }

}  // namespace memfit::kernels::cpu
