// M rows, K input features, N output features (linear: y[M,N] = x[M,K] w[N,K]^T + b).
// matmul: B batch, c[B,M,N] = op(a) op(b); a transposed operand is described
// to oneDNN by its strides, a broadcast one by a batch extent of 1.
#include "kernels/cpu/linear.hpp"

#include "kernels/cpu/dnnl_util.hpp"

namespace memfit::kernels::cpu {
namespace {

using dnnl::prop_kind;

struct IpDescs {
  dnnl::memory::desc x, w, b, y;
};

IpDescs ip_descs(const LinearParams& p) {
  return {plain_f32({p.M, p.K}), plain_f32({p.N, p.K}), p.bias ? plain_f32({p.N}) : dnnl::memory::desc(),
          plain_f32({p.M, p.N})};
}

dnnl::inner_product_forward::primitive_desc ip_fwd_pd(const IpDescs& d) {
  dnnl::inner_product_forward::desc desc(prop_kind::forward_training, d.x, d.w, d.b, d.y);
  return {desc, user_scratchpad_attr(), engine()};
}

class LinearFwd final : public Kernel {
 public:
  explicit LinearFwd(const LinearParams& p) : p_(p), d_(ip_descs(p)), pd_(ip_fwd_pd(d_)) {
    call_.set(dnnl::inner_product_forward(pd_));
  }
  const char* name() const override { return "dnnl.linear"; }
  size_t scratch_bytes() const override { return scratchpad_bytes(pd_); }
  void run(const StepContext&) override { call_.run(); }

 private:
  void on_bind() override {
    call_.clear_args();
    call_.arg(DNNL_ARG_SRC, d_.x, in_[0]);
    call_.arg(DNNL_ARG_WEIGHTS, d_.w, in_[1]);
    if (p_.bias) call_.arg(DNNL_ARG_BIAS, d_.b, in_[2]);
    call_.arg(DNNL_ARG_DST, d_.y, out_[0]);
    call_.arg(DNNL_ARG_SCRATCHPAD, pd_.scratchpad_desc(), scratch_);
  }
  LinearParams p_;
  IpDescs d_;
  dnnl::inner_product_forward::primitive_desc pd_;
  Call call_;
};

class LinearBwdData final : public Kernel {
 public:
  explicit LinearBwdData(const LinearParams& p) : d_(ip_descs(p)) {
    dnnl::inner_product_backward_data::desc desc(d_.x, d_.w, d_.y);
    pd_ = {desc, user_scratchpad_attr(), engine(), ip_fwd_pd(d_)};
    call_.set(dnnl::inner_product_backward_data(pd_));
  }
  const char* name() const override { return "dnnl.linear_bwd_data"; }
  size_t scratch_bytes() const override { return scratchpad_bytes(pd_); }
  void run(const StepContext&) override { call_.run(); }

 private:
  void on_bind() override {
    call_.clear_args();
    call_.arg(DNNL_ARG_DIFF_DST, d_.y, in_[0]);
    call_.arg(DNNL_ARG_WEIGHTS, d_.w, in_[1]);
    call_.arg(DNNL_ARG_DIFF_SRC, d_.x, out_[0]);
    call_.arg(DNNL_ARG_SCRATCHPAD, pd_.scratchpad_desc(), scratch_);
  }
  IpDescs d_;
  dnnl::inner_product_backward_data::primitive_desc pd_;
  Call call_;
};

class LinearBwdWeight final : public Kernel {
 public:
  explicit LinearBwdWeight(const LinearParams& p) : p_(p), d_(ip_descs(p)) {
    dnnl::inner_product_backward_weights::desc desc(d_.x, d_.w, d_.b, d_.y);
    pd_ = {desc, user_scratchpad_attr(), engine(), ip_fwd_pd(d_)};
    call_.set(dnnl::inner_product_backward_weights(pd_));
  }
  const char* name() const override { return "dnnl.linear_bwd_weight"; }
  size_t scratch_bytes() const override { return scratchpad_bytes(pd_); }
  void run(const StepContext&) override { call_.run(); }

 private:
  void on_bind() override {
    call_.clear_args();
    call_.arg(DNNL_ARG_SRC, d_.x, in_[0]);
    call_.arg(DNNL_ARG_DIFF_DST, d_.y, in_[1]);
    call_.arg(DNNL_ARG_DIFF_WEIGHTS, d_.w, out_[0]);
    if (p_.bias) call_.arg(DNNL_ARG_DIFF_BIAS, d_.b, out_[1]);
    call_.arg(DNNL_ARG_SCRATCHPAD, pd_.scratchpad_desc(), scratch_);
  }
  LinearParams p_;
  IpDescs d_;
  dnnl::inner_product_backward_weights::primitive_desc pd_;
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
