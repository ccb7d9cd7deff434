// M rows, K input features, N output features (linear: y[M,N] = x[M,K] w[N,K]^T + b).
// matmul: B batch, c[B,M,N] = op(a) op(b); a transposed operand is described
// to oneDNN by its strides, a broadcast one by a batch extent of 1.
#include "kernels/cpu/linear.hpp"

#include "kernels/cpu/dnnl_util.hpp"

namespace memfit::kernels::cpu {
namespace {

// The three linear kernels are oneDNN matmuls (brgemm), not inner
// products: the inner product's gemm implementation allocates its packing
// buffers on the heap at every call (megabytes at batch 256), outside the
// plan, while matmul keeps all of its buffers in the planned scratchpad.
// w is [N, K] row-major; w^T and dy^T are described by their strides.

// in: x, w, (b)  out: y = x w^T (+ b)
class LinearFwd final : public Kernel {
 public:
  explicit LinearFwd(const LinearParams& p)
      : p_(p),
        x_(plain_f32({p.M, p.K})),
        wt_(strided_f32({p.K, p.N}, {1, p.K})),
        b_(p.bias ? plain_f32({1, p.N}) : dnnl::memory::desc()),
        y_(plain_f32({p.M, p.N})) {
    dnnl::matmul::desc desc(x_, wt_, b_, y_);
    pd_ = {desc, user_scratchpad_attr(), engine()};
    call_.set(dnnl::matmul(pd_));
  }
  const char* name() const override { return "dnnl.linear"; }
  size_t scratch_bytes() const override { return scratchpad_bytes(pd_); }
  void run(const StepContext&) override { call_.run(); }

 private:
  void on_bind() override {
    call_.clear_args();
    call_.arg(DNNL_ARG_SRC, x_, in_[0]);
    call_.arg(DNNL_ARG_WEIGHTS, wt_, in_[1]);
    if (p_.bias) call_.arg(DNNL_ARG_BIAS, b_, in_[2]);
    call_.arg(DNNL_ARG_DST, y_, out_[0]);
    call_.arg(DNNL_ARG_SCRATCHPAD, pd_.scratchpad_desc(), scratch_);
  }
  LinearParams p_;
  dnnl::memory::desc x_, wt_, b_, y_;
  dnnl::matmul::primitive_desc pd_;
  Call call_;
};

// in: dy, w  out: dx = dy w
class LinearBwdData final : public Kernel {
 public:
  explicit LinearBwdData(const LinearParams& p)
      : dy_(plain_f32({p.M, p.N})), w_(plain_f32({p.N, p.K})), dx_(plain_f32({p.M, p.K})) {
    dnnl::matmul::desc desc(dy_, w_, dx_);
    pd_ = {desc, user_scratchpad_attr(), engine()};
    call_.set(dnnl::matmul(pd_));
  }
  const char* name() const override { return "dnnl.linear_bwd_data"; }
  size_t scratch_bytes() const override { return scratchpad_bytes(pd_); }
  void run(const StepContext&) override { call_.run(); }

 private:
  void on_bind() override {
    call_.clear_args();
    call_.arg(DNNL_ARG_SRC, dy_, in_[0]);
    call_.arg(DNNL_ARG_WEIGHTS, w_, in_[1]);
    call_.arg(DNNL_ARG_DST, dx_, out_[0]);
    call_.arg(DNNL_ARG_SCRATCHPAD, pd_.scratchpad_desc(), scratch_);
  }
  dnnl::memory::desc dy_, w_, dx_;
  dnnl::matmul::primitive_desc pd_;
  Call call_;
};

// in: x, dy  out: dw = dy^T x, (db = column sums of dy)
class LinearBwdWeight final : public Kernel {
 public:
  explicit LinearBwdWeight(const LinearParams& p)
      : p_(p), dyt_(strided_f32({p.N, p.M}, {1, p.N})), x_(plain_f32({p.M, p.K})), dw_(plain_f32({p.N, p.K})) {
    dnnl::matmul::desc desc(dyt_, x_, dw_);
    pd_ = {desc, user_scratchpad_attr(), engine()};
    call_.set(dnnl::matmul(pd_));
  }
  const char* name() const override { return "dnnl.linear_bwd_weight"; }
  size_t scratch_bytes() const override { return scratchpad_bytes(pd_); }
  void run(const StepContext&) override {
    call_.run();
    if (!p_.bias) return;
    const float* dy = in<float>(1);
    float* db = out<float>(1);
    const int64_t M = p_.M, N = p_.N;
    for (int64_t n = 0; n < N; ++n) db[n] = 0.0f;
    for (int64_t m = 0; m < M; ++m) {
      const float* row = dy + m * N;
#pragma omp simd
      for (int64_t n = 0; n < N; ++n) db[n] += row[n];
    }
  }

 private:
  void on_bind() override {
    call_.clear_args();
    call_.arg(DNNL_ARG_SRC, dyt_, in_[1]);
    call_.arg(DNNL_ARG_WEIGHTS, x_, in_[0]);
    call_.arg(DNNL_ARG_DST, dw_, out_[0]);
    call_.arg(DNNL_ARG_SCRATCHPAD, pd_.scratchpad_desc(), scratch_);
  }
  LinearParams p_;
  dnnl::memory::desc dyt_, x_, dw_;
  dnnl::matmul::primitive_desc pd_;
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
  }
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
  Call call_;
};

}  // namespace

std::unique_ptr<Kernel> make_linear(const LinearParams& p) { return try_make<LinearFwd, Kernel>(p); }
std::unique_ptr<Kernel> make_linear_bwd_data(const LinearParams& p) { return try_make<LinearBwdData, Kernel>(p); }
std::unique_ptr<Kernel> make_linear_bwd_weight(const LinearParams& p) { return try_make<LinearBwdWeight, Kernel>(p); }
std::unique_ptr<Kernel> make_matmul(const MatmulParams& p) { return try_make<Matmul, Kernel>(p); }

}  // namespace memfit::kernels::cpu
