// Parameter struct of the LSTM family, shared by the reference kernels
// (ops/lstm/ref.hpp) and the fast CPU kernels (ops/lstm/cpu.hpp).
//
// Dimension letters: N batch, T time steps, I input features, H hidden
// features; G = 4H gate rows in PyTorch's order i, f, g, o.
//
// lstm      in: x[N,T,I], w_ih[G,I], w_hh[G,H], b_ih[G], b_hh[G], (lengths[N] i32)
//           out: y[N,T,H], h_last[N,H], c_last[N,H], gates[T,N,G], cells[T,N,H]
//   h0 = c0 = 0. Step t of sample n runs for t < L_n = clamp(lengths[n], 0, T)
//   (T without lengths): a = w_ih x_t + b_ih + w_hh h + b_hh, i = sigma(a_i),
//   f = sigma(a_f), g = tanh(a_g), o = sigma(a_o), c = f c + i g,
//   h = o tanh(c); y[n,t] = h, gates[t,n] = (i,f,g,o), cells[t,n] = c. For
//   t >= L_n, y, gates and cells are 0 and the state stays; h_last and c_last
//   are the state after step L_n - 1 (a packed sequence's h_n, c_n).
// lstm_bwd  in: x, w_ih, w_hh, y, gates, cells, (lengths), (dy[N,T,H]),
//           (dh_last[N,H]), (dc_last[N,H])   out: dx[N,T,I], dw_ih[G,I],
//   dw_hh[G,H], db_ih[G], db_hh[G] (assigned; db_ih = db_hh). An absent
//   gradient is zero. dx[n,t] = 0 for t >= L_n.
#pragma once

#include <cstdint>

namespace memfit::kernels {

struct LstmParams {
  int64_t N, T, I, H;
  bool lengths = false;                   // a lengths input is present
  bool dy = false, dh = false, dc = false;  // lstm_bwd: which gradients flow in
};

// Positions of lstm_bwd's optional inputs (after x, w_ih, w_hh, y, gates, cells).
struct LstmBwdInputs {
  int lengths = -1, dy = -1, dh = -1, dc = -1;
  explicit LstmBwdInputs(const LstmParams& p) {
    int k = 6;
    if (p.lengths) lengths = k++;
    if (p.dy) dy = k++;
    if (p.dh) dh = k++;
    if (p.dc) dc = k++;
  }
};

// The number of steps sample n runs.
inline int64_t lstm_steps(const int32_t* lengths, int64_t n, int64_t T) {
  if (!lengths) return T;
  const int64_t L = lengths[n];
  return L < 0 ? 0 : (L > T ? T : L);
}

}  // namespace memfit::kernels
