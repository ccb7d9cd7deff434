// Scalar reference kernels for embedding (a gather of table rows) and its
// gradient (a scatter-add into the table's rows), the test oracle, and for
// gather_rows (rows at constant positions) and its gradient. T is float
// or double for the table and the activations; ids are i32 in every backend.
// n ids, V table rows, D row width (ops/embedding/params.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

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

// in: table[V,D]   out: y[K,D] = table[rows[k]].
template <class T>
class GatherRows final : public Kernel {
 public:
  explicit GatherRows(GatherRowsParams p) : p_(std::move(p)) {}
  const char* name() const override { return "ref.gather_rows"; }
  void run(const StepContext&) override {
    const T* table = in<T>(0);
    T* y = out<T>(0);
    const int64_t D = p_.D;
    for (size_t k = 0; k < p_.rows.size(); ++k)
      std::copy(table + p_.rows[k] * D, table + (p_.rows[k] + 1) * D, y + static_cast<int64_t>(k) * D);
  }

 private:
  GatherRowsParams p_;
};

// in: dy[K,D]   out: dtable[V,D], each row the sum in double of dy's rows
// that read it (ascending k), 0 for a row none read. The rows' readers are
// listed once, when the kernel is made.
template <class T>
class GatherRowsBwd final : public Kernel {
 public:
  explicit GatherRowsBwd(GatherRowsParams p) : p_(std::move(p)), start_(static_cast<size_t>(p_.V) + 1, 0) {
    for (int64_t r : p_.rows) ++start_[static_cast<size_t>(r) + 1];
    for (size_t v = 0; v < static_cast<size_t>(p_.V); ++v) start_[v + 1] += start_[v];
    readers_.resize(p_.rows.size());
    std::vector<int64_t> at(start_.begin(), start_.end() - 1);
    for (size_t k = 0; k < p_.rows.size(); ++k) readers_[static_cast<size_t>(at[static_cast<size_t>(p_.rows[k])]++)] = static_cast<int64_t>(k);
  }
  const char* name() const override { return "ref.gather_rows_bwd"; }
  void run(const StepContext&) override {
    const T* dy = in<T>(0);
    T* dt = out<T>(0);
    const int64_t D = p_.D;
    for (int64_t v = 0; v < p_.V; ++v)
      for (int64_t d = 0; d < D; ++d) {
        double acc = 0;
        for (int64_t j = start_[static_cast<size_t>(v)]; j < start_[static_cast<size_t>(v) + 1]; ++j)
          acc += static_cast<double>(dy[readers_[static_cast<size_t>(j)] * D + d]);
        dt[v * D + d] = static_cast<T>(acc);
      }
  }

 private:
  GatherRowsParams p_;
  std::vector<int64_t> start_;    // row v's readers are readers_[start_[v], start_[v + 1])
  std::vector<int64_t> readers_;  // k, grouped by row, ascending within one
};

}  // namespace memfit::kernels::ref
