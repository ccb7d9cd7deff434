// Parameter struct of the RNN family (Elman RNN and GRU), shared by the
// reference kernels (ops/rnn/ref.hpp) and the fast CPU kernels
// (ops/rnn/cpu.hpp).
//
// Dimension letters: N batch, T time steps, I input features, H hidden
// features; G gate rows: H for the Elman cells, 3H for the GRU in PyTorch's
// order r, z, n. h0 = 0 (the state every step of every sample starts from).
//
// rnn (cell tanh or relu)
//   in: x[N,T,I], w_ih[H,I], w_hh[H,H], b_ih[H], b_hh[H]
//   out: y[N,T,H], h_last[N,H]
//   h_t = act(w_ih x_t + b_ih + w_hh h_{t-1} + b_hh), y[n,t] = h_t,
//   h_last = h_{T-1}. The backward reads y only: tanh' = 1 - y^2,
//   relu' = [y > 0].
// rnn (cell gru)
//   in: x[N,T,I], w_ih[3H,I], w_hh[3H,H], b_ih[3H], b_hh[3H]
//   out: y[N,T,H], h_last[N,H], gates[T,N,4H] (f32)
//   ai = w_ih x_t + b_ih, ah = w_hh h_{t-1} + b_hh (3H each, rows r, z, n),
//   r = sigma(ai_r + ah_r), z = sigma(ai_z + ah_z),
//   n = tanh(ai_n + r ah_n), h_t = (1 - z) n + z h_{t-1};
//   gates[t,n] = (r, z, n, ah_n): what the backward reads besides y.
// rnn_bwd  in: x, w_ih, w_hh, y, (gates: gru), (dy[N,T,H]), (dh_last[N,H])
//          out: dx[N,T,I], dw_ih[G,I], dw_hh[G,H], db_ih[G], db_hh[G]
//   (assigned). An absent gradient is zero.
#pragma once

#include <cstdint>

namespace memfit::kernels {

enum class RnnCell : int { Tanh = 0, Relu = 1, Gru = 2 };

struct RnnParams {
  int64_t N, T, I, H;
  RnnCell cell = RnnCell::Tanh;
  bool dy = false, dh = false;  // rnn_bwd: which gradients flow in
  bool gru() const { return cell == RnnCell::Gru; }
  int64_t G() const { return gru() ? 3 * H : H; }
};

// Positions of rnn_bwd's optional inputs (after x, w_ih, w_hh, y[, gates]).
struct RnnBwdInputs {
  int gates = -1, dy = -1, dh = -1;
  explicit RnnBwdInputs(const RnnParams& p) {
    int k = 4;
    if (p.gru()) gates = k++;
    if (p.dy) dy = k++;
    if (p.dh) dh = k++;
  }
};

}  // namespace memfit::kernels
