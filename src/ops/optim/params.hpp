// Parameter structs of the optimizer updates: plain data shared by the scalar
// reference kernels (ops/optim/ref.hpp) and the fast CPU kernels
// (ops/optim/cpu.hpp); the lowerings fill them from a graph node.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace memfit::kernels {

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
  // bf16 accumulated gradients: per tensor, 1 where the gradient is stored
  // in bf16 (widened to f32 as the update reads it); empty when every
  // gradient is f32.
  std::vector<uint8_t> bf16_grads;
  bool any_bf16_weights() const {
    for (uint8_t b : bf16_weights)
      if (b) return true;
    return false;
  }
  bool any_bf16_grads() const {
    for (uint8_t b : bf16_grads)
      if (b) return true;
    return false;
  }
  bool grad16(size_t t) const { return !bf16_grads.empty() && bf16_grads[t]; }
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

// grad_accumulate_matmul  in: acc[M,N] (bf16), a [M,K] ([K,M] if trans_a),
// b [K,N] ([N,K] if trans_b), both f32: acc = SR(op(a) op(b)) on micro-batch
// 0 when `first`, else SR(acc + op(a) op(b)), with the bits of
// qstate::grad_rounding_key(seed, step, micro, param, part) at element i*N + j.
struct AccumulateMatmulParams {
  int64_t M = 0, N = 0, K = 0;
  bool trans_a = false, trans_b = false;
  std::string param;
  bool first = true;
  uint64_t part = 0;
};

// grad_accumulate_rows  in: acc[V,D] (bf16), ids[n] (i32), dy[n,D] (f32):
// for each id r in [0, V) that occurs, s = the sum in f32 of dy's rows at
// its positions in increasing order, acc[r] = SR(acc[r] + s) (the row's
// elements r*D + j keyed as grad_accumulate_matmul's); on micro-batch 0 with
// `first`, acc is zeroed first.
struct AccumulateRowsParams {
  int64_t V = 0, D = 0, n = 0;
  std::string param;
  bool first = false;
  uint64_t part = 0;
};

}  // namespace memfit::kernels
