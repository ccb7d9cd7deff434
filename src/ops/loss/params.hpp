// Parameter structs of softmax cross-entropy: plain data shared by the scalar
// reference kernels (ops/loss/ref.hpp) and the fast CPU kernels
// (ops/loss/cpu.hpp); the lowerings fill them from a graph node.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace memfit::kernels {

// softmax_xent      in: logits[N,C], labels[N] (i32)   out: loss[1], probs[N,C]
//   loss = mean over N of -sum_c q_c log p_c, q = (1-s) onehot + s/C.
// softmax_xent_bwd  in: probs, labels, dloss[1]        out: dlogits = (p - q) dloss / N
//   Labels must lie in [0, C) (the data loader checks); a kernel never indexes with
//   an out-of-range label: that row's loss and dlogits become NaN.
struct XentParams {
  int64_t N, C;
  double smoothing = 0.0;
};

}  // namespace memfit::kernels
