// Parameter structs of the Transformer's ops over the last axis of an N-d
// tensor (layer norm, softmax) and of GELU, shared by the reference kernels
// (ops/{layernorm,softmax,gelu}/ref.hpp) and the fast CPU kernels
// (ops/{layernorm,softmax,gelu}/cpu.hpp).
//
// Dimension letters: R rows (the product of every axis but the last), D the
// last axis (the one normalised or soft-maxed over); n elements.
// Every tensor is dense row-major: row r is elements [r D, (r + 1) D).
// Gradient contract: every backward kernel assigns its outputs.
#pragma once

#include <cstdint>

namespace memfit::kernels {

// layer_norm      in: x[R,D], gamma[D], beta[D]   out: y[R,D], mean[R], rstd[R] (f32)
//   mean = sum_D x / D, var = sum_D (x - mean)^2 / D (biased, as PyTorch),
//   rstd = 1 / sqrt(var + eps), y = (x - mean) rstd gamma + beta. y may be
//   x's buffer (in place).
// layer_norm_bwd  in: x, dy, gamma, mean, rstd   out: dx[R,D], dgamma[D], dbeta[D] (f32)
//   xhat = (x - mean) rstd, g = dy gamma:
//   dx = rstd (g - sum_D g / D - xhat sum_D (g xhat) / D),
//   dgamma = sum_R dy xhat, dbeta = sum_R dy. dx may be dy's buffer.
struct LayerNormParams {
  int64_t R, D;
  double eps = 1e-5;
};

// gelu      in: x      out: y = x Phi(x)
//   exact (tanh = false): Phi(x) = (1 + erf(x / sqrt 2)) / 2 (BERT);
//   tanh: Phi(x) ~ (1 + tanh(u)) / 2, u = sqrt(2/pi) (x + 0.044715 x^3) (GPT-2),
//   as torch.nn.functional.gelu(approximate='none' / 'tanh').
// gelu_bwd  in: x, dy  out: dx = dy gelu'(x); dx may be dy's buffer, y x's.
struct GeluParams {
  int64_t n;
  bool tanh = false;
};

// softmax      in: x[R,D]   out: y = exp(x - max_D x) / sum_D exp(x - max_D x)
//   (y may be x's buffer)
// softmax_bwd  in: y, dy    out: dx = y (dy - sum_D dy y) (dx may be dy's buffer)
struct SoftmaxParams {
  int64_t R, D;
};

}  // namespace memfit::kernels
