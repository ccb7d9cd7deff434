// Parameters of the fused attention op and its backward (ops/attention/
// op.cpp), shared by the reference kernels (ops/attention/ref.hpp)
// and the fast CPU kernels (ops/attention/cpu.hpp).
//
// Dimension letters: B batch, H heads, T queries, S keys, D query/key width,
// Dv value width. mask[B,S] (i32) and lse[B,H,T] are dense; q, k, v, out
// and dout are rows of D (Dv) contiguous elements placed as the layout says:
//   bhtd    q[B,H,T,D], k[B,H,S,D], v[B,H,S,Dv], out/dout[B,H,T,Dv]
//   bthd    q[B,T,H,D], k[B,S,H,D], v[B,S,H,Dv], out/dout[B,T,H,Dv]: the
//           heads of a Linear's output as they are, no permute on either side
//   packed  one input qkv[B,T,3,H,D] (T = S, Dv = D: q, k, v side by side as
//           one fused projection writes them) and out/dout[B,T,H,D]; the
//           backward writes dqkv in the same layout
// The gradients dq, dk, dv have the layout of q, k, v. The arithmetic is the
// same in every layout (same order, same bits); only addresses differ.
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
// Dropout (p > 0) is counter-based like the dropout op (ops/dropout/params.hpp):
// element (b, h, i, j) is kept iff rng::uniform01(key, base + ((b H + h) T +
// i) S + j) >= float(p), key = stream_key(seed, stream, step) and base =
// row0 H T S (a micro-batch whose first row in the global batch is row0,
// StepContext::row0, draws the whole batch's rows row0..row0+B-1).
// The backward draws the same bits; nothing is stored.
#pragma once

#include <cstdint>

#include "memfit/rng.hpp"

namespace memfit::kernels {

enum class AttentionLayout : uint8_t { BHTD, BTHD, Packed };

// Where row t of head (b, h) of one operand starts, in elements of its
// buffer: off + b sb + h sh + t st (st: the distance between rows).
struct RowMap {
  int64_t sb, sh, st, off = 0;
  int64_t at(int64_t b, int64_t h, int64_t t) const { return off + b * sb + h * sh + t * st; }
};

struct AttentionParams {
  int64_t B, H, T, S, D, Dv;
  double scale = 1.0;
  bool causal = false;
  bool mask = false;   // a key mask is the last input
  double dropout = 0.0;
  uint64_t stream = 0;
  AttentionLayout layout = AttentionLayout::BHTD;

  bool packed() const { return layout == AttentionLayout::Packed; }
  // Inputs (and backward outputs) that carry q, k, v: 3, or 1 when packed.
  size_t qkv_inputs() const { return packed() ? 1 : 3; }
  size_t k_input() const { return packed() ? 0 : 1; }
  size_t v_input() const { return packed() ? 0 : 2; }
  // Row maps of q (and dq), k (dk), v (dv), out (dout); N rows of W wide.
  RowMap map(int64_t N, int64_t W, int64_t part) const {
    switch (layout) {
      case AttentionLayout::BHTD: return {H * N * W, N * W, W};
      case AttentionLayout::BTHD: return {N * H * W, W, H * W};
      case AttentionLayout::Packed: return {N * 3 * H * W, W, 3 * H * W, part * H * W};
    }
    return {0, 0, 0};
  }
  RowMap q_map() const { return map(T, D, 0); }
  RowMap k_map() const { return map(S, D, 1); }
  RowMap v_map() const { return map(S, Dv, 2); }
  RowMap o_map() const {
    return layout == AttentionLayout::BHTD ? RowMap{H * T * Dv, T * Dv, Dv} : RowMap{T * H * Dv, Dv, H * Dv};
  }

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
inline AttentionDraw attention_draw(const AttentionParams& p, uint64_t seed, int64_t step, int64_t row0) {
  return {rng::stream_key(seed, p.stream, static_cast<uint64_t>(step)),
          static_cast<uint64_t>(row0) * static_cast<uint64_t>(p.H * p.T * p.S)};
}

}  // namespace memfit::kernels
