// Parameter structs of the embedding family, shared by the reference kernels
// (ops/embedding/ref.hpp) and the fast CPU kernels (ops/embedding/cpu.hpp).
//
// Dimension letters: n ids (all axes of the id tensor), V vocabulary rows,
// D embedding width.
#pragma once

#include <cstdint>
#include <vector>

namespace memfit::kernels {

// embedding      in: ids[n] (i32), table[V,D]   out: y[n,D], y[i] = table[ids[i]]
// embedding_bwd  in: ids[n] (i32), dy[n,D][, acc[V,D]]  out: dtable[V,D]: row v
//   starts as 0 (or acc's row v, with acc) and the rows dy[i] with ids[i] = v
//   are added to it, each element in ascending i: every kernel adds in that
//   order, whatever its threads, so the result is the same every run. acc may
//   be dtable's own buffer (in place).
// Ids must lie in [0, V). A kernel never indexes with an out-of-range id: the
// forward row of one is NaN (so the mistake shows in the loss, as a bad label
// does in softmax_xent) and the backward drops its dy row.
// gather_rows      in: table[V,D]   out: y[K,D], y[k] = table[rows[k]]
// gather_rows_bwd  in: dy[K,D]      out: dtable[V,D], row v the sum (in
//   double, ascending k) of the rows dy[k] with rows[k] = v, 0 if none.
// D is the product of the table's axes after the first; rows lie in [0, V)
// (the op's shape inference checks them).
struct GatherRowsParams {
  std::vector<int64_t> rows;
  int64_t V, D;
};

struct EmbeddingParams {
  int64_t n, V, D;
  bool acc = false;  // embedding_bwd: a third input to add into
};

}  // namespace memfit::kernels
