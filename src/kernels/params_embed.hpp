// Parameter structs of the embedding and permute families (kernels/params.hpp
// holds the others), shared by the reference kernels (kernels/ref) and the
// fast CPU kernels (kernels/cpu).
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
struct EmbeddingParams {
  int64_t n, V, D;
  bool acc = false;  // embedding_bwd: a third input to add into
};

// permute  in: x[dims]   out: y with y's axis i = x's axis perm[i]
//   (y[j_0, ..., j_{r-1}] = x[i] with i_{perm[k]} = j_k). Pure data movement:
//   any element type.
struct PermuteParams {
  std::vector<int64_t> dims, perm;
};

}  // namespace memfit::kernels
