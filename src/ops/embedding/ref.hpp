// Scalar reference kernels for embedding (a gather of table rows) and its
// gradient (a scatter-add into the table's rows), the test oracle. T is float
// or double for the table and the activations; ids are i32 in every backend.
// n ids, V table rows, D row width (ops/embedding/params.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include "kernels/kernel.hpp"
#include "ops/embedding/params.hpp"

namespace memfit::kernels::ref {

// in: ids[n] (i32), table[V,D]   out: y[n,D] = table[ids[i]]; NaN rows for
// out-of-range ids.
template <class T>
class Embedding final : public Kernel {
 public:
  explicit Embedding(EmbeddingParams p) : p_(p) {}
  const char* name() const override { return "ref.embedding"; }
  void run(const StepContext&) override {
    const int32_t* ids = in<int32_t>(0);
    const T* table = in<T>(1);
    T* y = out<T>(0);
    const int64_t D = p_.D;
    for (int64_t i = 0; i < p_.n; ++i) {
      const int64_t id = ids[i];
      T* row = y + i * D;
      if (id < 0 || id >= p_.V) std::fill(row, row + D, std::numeric_limits<T>::quiet_NaN());
      else std::copy(table + id * D, table + (id + 1) * D, row);
    }
  }

 private:
  EmbeddingParams p_;
};

// in: ids[n] (i32), dy[n,D][, acc[V,D]]   out: dtable[V,D], zeroed (or acc
// copied, unless it is the same buffer), then dy's rows added in ascending i;
// rows of out-of-range ids are dropped.
template <class T>
class EmbeddingBwd final : public Kernel {
 public:
  explicit EmbeddingBwd(EmbeddingParams p) : p_(p) {}
  const char* name() const override { return "ref.embedding_bwd"; }
  void run(const StepContext&) override {
    const int32_t* ids = in<int32_t>(0);
    const T* dy = in<T>(1);
    T* dt = out<T>(0);
    const int64_t D = p_.D;
    if (!p_.acc) std::fill(dt, dt + p_.V * D, T(0));
    else if (const T* acc = in<T>(2); acc != dt) std::copy(acc, acc + p_.V * D, dt);
    for (int64_t i = 0; i < p_.n; ++i) {
      const int64_t id = ids[i];
      if (id < 0 || id >= p_.V) continue;
      for (int64_t d = 0; d < D; ++d) dt[id * D + d] += dy[i * D + d];
    }
  }

 private:
  EmbeddingParams p_;
};

}  // namespace memfit::kernels::ref
