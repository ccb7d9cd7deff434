// n ids, V table rows, D row width.
#include "ops/embedding/cpu.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/cpu/bf16_simd.hpp"
#include "kernels/cpu/parallel.hpp"

namespace memfit::kernels::cpu {
namespace {

// in: ids[n] (i32), table[V,D] (f32)   out: y[n,D] (T: float or bf16_t)
template <class T>
class EmbeddingFwd final : public Kernel {
 public:
  explicit EmbeddingFwd(const EmbeddingParams& p) : p_(p) {}
  const char* name() const override { return std::is_same_v<T, float> ? "cpu.embedding" : "cpu.embedding.bf16"; }
  void run(const StepContext&) override {
    const int32_t* ids = in<int32_t>(0);
    const float* table = in<float>(1);
    T* y = out<T>(0);
    const int64_t V = p_.V, D = p_.D;
    const T nan = simd::from_f32<T>(std::numeric_limits<float>::quiet_NaN());
    parallel_for(p_.n, p_.n * D, [&](int64_t i) {
      const int64_t id = ids[i];
      T* row = y + i * D;
      if (id < 0 || id >= V) {
        std::fill(row, row + D, nan);
        return;
      }
      const float* src = table + id * D;
      if constexpr (std::is_same_v<T, float>) {
        std::memcpy(row, src, static_cast<size_t>(D) * sizeof(float));
      } else {
        simd::for_row(D, [&](int64_t j, simd::Mask m) { simd::store(row + j, simd::load(src + j, m), m); });
      }
    });
  }

 private:
  EmbeddingParams p_;
};

// in: ids[n] (i32), dy[n,D] (T)[, acc[V,D] (f32)]   out: dtable[V,D] (f32)
template <class T>
class EmbeddingBwd final : public Kernel {
 public:
  explicit EmbeddingBwd(const EmbeddingParams& p) : p_(p) {}
  const char* name() const override {
    return std::is_same_v<T, float> ? "cpu.embedding_bwd" : "cpu.embedding_bwd.bf16";
  }
  void run(const StepContext&) override {
    const int32_t* ids = in<int32_t>(0);
    const T* dy = in<T>(1);
    float* dt = out<float>(0);
    const int64_t n = p_.n, V = p_.V, D = p_.D;
    // The zeroing (the table is usually far larger than dy) is one memset
    // per thread, so that glibc sees the whole range and streams a large one
    // past the caches: zeroing GPT-2's 154 MB table row by row took 1.5x as
    // long on one thread, in 64 pieces 1.3x (AMD EPYC, 32 MiB L3).
    // With acc the start is a copy of it (a memcpy per thread likewise), or
    // nothing at all when acc is dtable's own buffer.
    const float* acc = p_.acc ? in<float>(2) : nullptr;
    const int64_t total = V * D, zchunks = use_team(total) ? omp_get_max_threads() : 1;
    if (acc != dt)
      parallel_for(zchunks, total, [&](int64_t c) {
        const int64_t b = c * total / zchunks, e = (c + 1) * total / zchunks;
        if (acc) std::memcpy(dt + b, acc + b, static_cast<size_t>(e - b) * sizeof(float));
        else std::memset(dt + b, 0, static_cast<size_t>(e - b) * sizeof(float));
      });
    // Blocks of dtable: col_parts ranges of whole 16-column groups times
    // row_parts ranges of rows, about one block per thread; each scans all
    // ids for those in its rows. Which block an element falls in changes no
    // sum (each is still added in ascending i).
    const int64_t work = n * D;
    const int64_t threads = use_team(work) ? omp_get_max_threads() : 1;
    const int64_t groups = (D + simd::kLanes - 1) / simd::kLanes;
    const int64_t col_parts = std::min(threads, groups);
    const int64_t row_parts = std::min(V, (threads + col_parts - 1) / col_parts);
    parallel_for(row_parts * col_parts, work, [&](int64_t t) {
      const int64_t r = t / col_parts, c = t % col_parts;
      const int64_t v0 = r * V / row_parts, v1 = (r + 1) * V / row_parts;
      const int64_t d0 = std::min(D, c * groups / col_parts * simd::kLanes);
      const int64_t d1 = std::min(D, (c + 1) * groups / col_parts * simd::kLanes);
      const int64_t len = d1 - d0;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t id = ids[i];
        if (id < v0 || id >= v1) continue;  // another block's row, or out of range
        float* dst = dt + id * D + d0;
        const T* src = dy + i * D + d0;
#pragma omp simd
        for (int64_t j = 0; j < len; ++j) dst[j] += simd::to_f32(src[j]);
      }
    });
  }

 private:
  EmbeddingParams p_;
};

// A bf16 table (bf16 master weights): in: ids[n] (i32), table[V,D] (bf16)
// out: y[n,D], bf16 (rows copied) or f32 (widened exactly). Plain copies and
// conversions: no AVX-512 needed.
class EmbeddingFwdBf16Table final : public Kernel {
 public:
  EmbeddingFwdBf16Table(const EmbeddingParams& p, bool f32_out) : p_(p), f32_out_(f32_out) {}
  const char* name() const override { return f32_out_ ? "cpu.embedding.w16" : "cpu.embedding.bf16.w16"; }
  void run(const StepContext&) override {
    const int32_t* ids = in<int32_t>(0);
    const bf16_t* table = in<bf16_t>(1);
    const int64_t V = p_.V, D = p_.D;
    parallel_for(p_.n, p_.n * D, [&](int64_t i) {
      const int64_t id = ids[i];
      const size_t d = static_cast<size_t>(D);
      if (f32_out_) {
        float* row = out<float>(0) + i * D;
        if (id < 0 || id >= V) std::fill(row, row + D, std::numeric_limits<float>::quiet_NaN());
        else bf16_to_f32(table + id * D, row, d);
      } else {
        bf16_t* row = out<bf16_t>(0) + i * D;
        if (id < 0 || id >= V) std::fill(row, row + D, f32_to_bf16(std::numeric_limits<float>::quiet_NaN()));
        else std::memcpy(row, table + id * D, d * sizeof(bf16_t));
      }
    });
  }

 private:
  EmbeddingParams p_;
  bool f32_out_;
};

}  // namespace

std::unique_ptr<Kernel> make_embedding(const EmbeddingParams& p, ElemType act, bool bf16_table) {
  if (bf16_table) {
    if (act != ElemType::F32 && act != ElemType::BF16) return nullptr;
    return std::make_unique<EmbeddingFwdBf16Table>(p, act == ElemType::F32);
  }
  return simd::make_for<EmbeddingFwd>(act, p);
}
std::unique_ptr<Kernel> make_embedding_bwd(const EmbeddingParams& p, ElemType act) {
  return simd::make_for<EmbeddingBwd>(act, p);
}

}  // namespace memfit::kernels::cpu
