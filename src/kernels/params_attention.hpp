// Parameters of the fused attention op and its backward (graph/ops/
// attention.cpp), shared by the reference kernels (kernels/ref/attention.hpp)
// and the fast CPU kernels (kernels/cpu/attention.hpp).
//
// Dimension letters: B batch, H heads, T queries, S keys, D query/key width,
// Dv value width. Dense row-major: q[B,H,T,D], k[B,H,S,D], v[B,H,S,Dv],
// mask[B,S] (i32), out/dout[B,H,T,Dv], lse[B,H,T].
//
// attention      in: q, k, v[, mask]   out: out, lse
//   Row (b, h, i) attends key j iff mask[b, j] != 0 (when there is a mask)
//   and, under causal, j <= i + (S - T) (the last query sees every key).
//   s_j = scale q_i . k_j over the attended keys; lse_i = log sum_j exp(s_j);
//   P_ij = exp(s_j - lse_i); out_i = sum_j P_ij keep_ij / (1 - p) v_j.
//   A row that attends no key: out_i = 0, lse_i = -inf, and its gradients
//   (its dq row, its terms in dk and dv) are 0. (PyTorch gives NaN there.)
// attention_bwd  in: q, k, v, out, lse, dout[, mask]   out: dq, dk, dv
//   delta_i = sum dout_i out_i; dP_ij = keep_ij / (1 - p) dout_i . v_j;
//   dS_ij = P_ij (dP_ij - delta_i); dq_i = scale sum_j dS_ij k_j;
//   dk_j = scale sum_i dS_ij q_i; dv_j = sum_i P_ij keep_ij / (1 - p) dout_i.
//   The backward assigns its outputs.
//
// Dropout (p > 0) is counter-based like the dropout op (kernels/params.hpp):
// element (b, h, i, j) is kept iff rng::uniform01(key, base + ((b H + h) T +
// i) S + j) >= float(p), key = stream_key(seed, stream, step) and base =
// micro B H T S (micro-batch m draws the whole batch's rows m B..(m+1) B-1).
// The backward draws the same bits; nothing is stored.
#pragma once

#include <cstdint>

#include "memfit/rng.hpp"

namespace memfit::kernels {

struct AttentionParams {
  int64_t B, H, T, S, D, Dv;
  double scale = 1.0;
  bool causal = false;
  bool mask = false;   // a key mask is the last input
  double dropout = 0.0;
  uint64_t stream = 0;

  // Last key row i may attend under causal (exclusive bound), before the mask.
  int64_t key_end(int64_t i) const {
    if (!causal) return S;
    const int64_t e = i + (S - T) + 1;
    return e < 0 ? 0 : (e > S ? S : e);
  }
};

// The dropout stream of one run: the key and the counter of element
// (0, 0, 0, 0) of this micro-batch.
struct AttentionDraw {
  uint64_t key, base;
};
inline AttentionDraw attention_draw(const AttentionParams& p, uint64_t seed, int64_t step, int64_t micro) {
  return {rng::stream_key(seed, p.stream, static_cast<uint64_t>(step)),
          static_cast<uint64_t>(micro) * static_cast<uint64_t>(p.B * p.H * p.T * p.S)};
}

}  // namespace memfit::kernels
