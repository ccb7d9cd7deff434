// Plain parameter structs, one per op family, shared by the scalar reference
// kernels (kernels/ref) and the oneDNN kernels (kernels/cpu). The runtime's
// lowering fills them from a graph node.
//
// Dimension letters: N batch, C input channels, H/W input height/width,
// K output channels, R/S kernel height/width, OH/OW output height/width,
// M/N/K for matrix products (C[M,N] = A[M,K] * B[K,N]).
// All tensors are dense row-major (NCHW for images) unless a kernel says so.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memfit/rng.hpp"

namespace memfit::kernels {

// conv2d            in: x[N,C,H,W], w[K,C/G,R,S], b[K] (if bias)  out: y[N,K,OH,OW]
// conv2d_bwd_data   in: dy[N,K,OH,OW], w                          out: dx[N,C,H,W]
// conv2d_bwd_weight in: x, dy                                     out: dw[K,C/G,R,S], db[K] (if bias)
struct ConvParams {
  int64_t N, C, H, W, K, R, S, OH, OW;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1, groups = 1;
  bool bias = false;
};

// linear            in: x[M,K], w[N,K], b[N] (if bias)   out: y[M,N] = x w^T + b
// linear_bwd_data   in: dy[M,N], w[N,K]                  out: dx[M,K]
// linear_bwd_weight in: x[M,K], dy[M,N]                  out: dw[N,K], db[N] (if bias)
struct LinearParams {
  int64_t M, K, N;
  bool bias = false;
};

// matmul  in: a, b  out: c[B,M,N] = op(a) op(b) per batch;
//   a is [B,M,K] ([B,K,M] if trans_a), b is [B,K,N] ([B,N,K] if trans_b).
//   a_batch/b_batch = 1 broadcasts that operand over the batch.
struct MatmulParams {
  int64_t B, M, N, K;
  bool trans_a = false, trans_b = false;
  int64_t a_batch = 0, b_batch = 0;  // 0 means B
};

// relu      in: x      out: y
// relu_bwd  in: y, dy  out: dx = dy * (y > 0)
// add       in: a, b   out: a + b
// scale     in: x      out: alpha * x
struct EltwiseParams {
  int64_t n;
  double alpha = 1.0;
};

// max_pool2d      in: x[N,C,H,W]        out: y[N,C,OH,OW], idx[N,C,OH,OW] (i32 workspace)
// max_pool2d_bwd  in: dy, idx           out: dx[N,C,H,W]
// avg_pool2d      in: x                 out: y
// avg_pool2d_bwd  in: dy                out: dx
// Padding never wins a max; avg divides by the full window (count_include_pad)
// or by the valid elements.
struct PoolParams {
  int64_t N, C, H, W, OH, OW, R, S;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  bool count_include_pad = true;
};

// global_avg_pool      in: x[N,C,H,W]  out: y[N,C]
// global_avg_pool_bwd  in: dy[N,C]     out: dx[N,C,H,W] = dy / (H*W)
struct GlobalPoolParams {
  int64_t N, C, HW;
};

// batch_norm      in: x[N,C,HW], gamma[C], beta[C], running_mean[C], running_var[C]
//                 out: y, mean[C], var[C] (biased batch variance when training;
//                 copies of the running statistics in eval)
//   training: normalises with batch statistics and updates the running
//   statistics in place: rm = (1-momentum) rm + momentum mean,
//   rv = (1-momentum) rv + momentum var * n/(n-1), n = N*HW.
// batch_norm_bwd  in: x, dy, gamma, mean, var   out: dx, dgamma[C], dbeta[C]
struct BatchNormParams {
  int64_t N, C, HW;
  double eps = 1e-5, momentum = 0.1;
  bool training = true;
  bool update_stats = true;  // false: a recomputation, which leaves the running statistics alone
};

// dropout      in: x      out: y, mask[n] (u8: 1 kept)
// dropout_bwd  in: dy, mask  out: dx
// The tensor is [rows, ...] with the batch first. Element i is kept iff
// rng::uniform01(rng::stream_key(ctx.seed, stream, ctx.step), ctx.row0 * (n / rows) + i) >= float(p)
// (compared in f32, as tests/golden/make_golden.py does); kept values are scaled by 1/(1-p). A
// micro-batch (of an accumulated step, or one rank's share) so draws its rows of the whole global
// batch's mask: one process with accumulation m draws row0 = m * rows, i.e. m * n.
struct DropoutParams {
  int64_t n;
  double p;
  uint64_t stream;
  int64_t rows = 1;  // the leading (batch) extent; n is a multiple of it
};

// The mask stream of the formula above for one run: the key, and the
// counter of this micro-batch's element 0 (element i draws base + i).
struct DropoutDraw {
  uint64_t key, base;
};
inline DropoutDraw dropout_draw(const DropoutParams& p, uint64_t seed, int64_t step, int64_t row0) {
  const int64_t per_row = p.rows > 1 ? p.n / p.rows : p.n;
  return {rng::stream_key(seed, p.stream, static_cast<uint64_t>(step)),
          static_cast<uint64_t>(row0) * static_cast<uint64_t>(per_row)};
}

// concat  in: x_0..x_{k-1}   out: y, joined along one axis.
// slice   in: x              out: y = x[..., start:start+len, ...] along the axis.
// The tensors are viewed as [outer, axis, inner].
struct ConcatParams {
  int64_t outer, inner;
  std::vector<int64_t> sizes;  // extent of each input along the axis
};
struct SliceParams {
  int64_t outer, inner, axis_in, start, len;
};

// softmax_xent      in: logits[N,C], labels[N] (i32)   out: loss[1], probs[N,C]
//   loss = mean over N of -sum_c q_c log p_c, q = (1-s) onehot + s/C.
// softmax_xent_bwd  in: probs, labels, dloss[1]        out: dlogits = (p - q) dloss / N
//   Labels must lie in [0, C) (the data loader checks); a kernel never indexes with
//   an out-of-range label: that row's loss and dlogits become NaN.
struct XentParams {
  int64_t N, C;
  double smoothing = 0.0;
};

// fill  out: y[n] = value (e.g. the seed gradient 1 of the loss)
struct FillParams {
  int64_t n;
  double value;
};

// sgd_update  in: p_0..p_{k-1}, g_0..g_{k-1}, m_0..m_{k-1} (m only if momentum != 0)
//   in place: g' = g*grad_scale + wd p (wd per tensor); m = momentum m + g' (first step: m = g');
//   p -= lr (nesterov ? g' + momentum m : m).
//   clip_norm > 0: first the gradients' global L2 norm (times grad_scale) is
//   computed and, when above clip_norm, the gradients are scaled by
//   clip_norm / (norm + 1e-6), as torch.nn.utils.clip_grad_norm_ does.
// How an update stores its state tensors (the moments; kernels/optim_state.hpp):
//  F32  every state value f32, of its parameter's shape;
//  BF16 every state value bf16 (stochastic rounding), of its parameter's shape;
//  Q8   per tensor: blockwise[t] = 1: u8 codes of its parameter's shape and,
//       after the state groups, one f32 value [states, blocks] of absmax
//       scales (row s for state s); blockwise[t] = 0 (small tensors): the
//       states f32 and the scale value a placeholder (not read).
// The inputs keep the layout p_0..p_{k-1}, g_0..g_{k-1}, then each state
// group of k values (Q8: the scales last); names[t] names tensor t in errors.
enum class StateFormat : uint8_t { F32, BF16, Q8 };
struct StateLayout {
  StateFormat format = StateFormat::F32;
  std::vector<uint8_t> blockwise;  // Q8: per tensor
  std::vector<std::string> names;  // per tensor (BF16, Q8, or any bf16 weight)
  // bf16 master weights: per tensor, 1 where the parameter is stored in
  // bf16 (its update computes in f32 and rounds stochastically: see
  // kernels/optim_state.hpp); empty when every parameter is f32.
  std::vector<uint8_t> bf16_weights;
  bool any_bf16_weights() const {
    for (uint8_t b : bf16_weights)
      if (b) return true;
    return false;
  }
};

struct SgdParams {
  double clip_norm = 0.0;
  std::vector<int64_t> sizes;
  std::vector<double> weight_decay;  // per tensor
  double momentum = 0.0;
  bool nesterov = false;
  StateLayout state;
};

}  // namespace memfit::kernels

namespace memfit::kernels {

// adam_update  in: p_0..p_{k-1}, g_0..g_{k-1}, m_0..m_{k-1}, v_0..v_{k-1}; in place, t = ctx.step + 1:
//   g' = g*grad_scale (+ wd p unless decoupled); m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
//   p -= lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)  (decoupled: p -= lr wd p first).
struct AdamParams {
  double clip_norm = 0.0;  // as in SgdParams
  std::vector<int64_t> sizes;
  std::vector<double> weight_decay;  // per tensor
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool decoupled = false;
  StateLayout state;
};

// adafactor_update  in: p_0..p_{k-1}, g_0..g_{k-1}, r_0..r_{k-1}, c_0..c_{k-1}; in place,
// t = ctx.step + 1 (Shazeer & Stern 2018, without a first moment):
//   g' = g*grad_scale (clipping as in SgdParams); rho = 1 - t^decay_rate;
//   a parameter of rows[t] > 0 rows (factored: the tensor seen as rows x n/rows):
//     r = rho r + (1-rho) mean_cols(g'^2 + eps1)  [rows];  c = rho c + (1-rho) mean_rows(g'^2 + eps1)  [cols];
//     u = g' / sqrt((r / mean(r)) c)  (an outer product approximates the second moment)
//   rows[t] == 0 (1-d): r = rho r + (1-rho)(g'^2 + eps1) [n], c a placeholder; u = g' / sqrt(r);
//   u /= max(1, rms(u) / clip_threshold);
//   step size a = relative_step ? min(1e-2, 1/sqrt(t)) * max(eps2, rms(p)) : lr;
//   p -= a wd p;  p -= a u.
// Sums accumulate in double.
struct AdafactorParams {
  double clip_norm = 0.0;  // as in SgdParams
  std::vector<int64_t> sizes;
  std::vector<double> weight_decay;  // per tensor
  std::vector<int64_t> rows;         // per tensor: rows of the factored view, 0 = unfactored
  double eps1 = 1e-30, eps2 = 1e-3, clip_threshold = 1.0, decay_rate = -0.8;
  bool relative_step = true;
};

}  // namespace memfit::kernels
