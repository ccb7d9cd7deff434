// Scalar reference kernels for linear and batched matmul.
// M rows, K input features, N output features; for matmul B batch and
// C[M,N] = A[M,K] * B[K,N].
#pragma once

#include "kernels/kernel.hpp"
#include "ops/linear/params.hpp"

namespace memfit::kernels::ref {

template <class T>
class Linear final : public Kernel {
 public:
  explicit Linear(LinearParams p) : p_(p) {}
  const char* name() const override { return "ref.linear"; }
  void run(const StepContext&) override {
    const T* x = in<T>(0);
    const T* w = in<T>(1);
    const T* b = p_.bias ? in<T>(2) : nullptr;
    T* y = out<T>(0);
    for (int64_t m = 0; m < p_.M; ++m)
      for (int64_t n = 0; n < p_.N; ++n) {
        T acc = b ? b[n] : T(0);
        for (int64_t k = 0; k < p_.K; ++k) acc += x[m * p_.K + k] * w[n * p_.K + k];
        y[m * p_.N + n] = acc;
      }
  }

 private:
  LinearParams p_;
};

template <class T>
class LinearBwdData final : public Kernel {
 public:
  explicit LinearBwdData(LinearParams p) : p_(p) {}
  const char* name() const override { return "ref.linear_bwd_data"; }
  void run(const StepContext&) override {
    const T* dy = in<T>(0);
    const T* w = in<T>(1);
    T* dx = out<T>(0);
    for (int64_t m = 0; m < p_.M; ++m)
      for (int64_t k = 0; k < p_.K; ++k) {
        T acc = 0;
        for (int64_t n = 0; n < p_.N; ++n) acc += dy[m * p_.N + n] * w[n * p_.K + k];
        dx[m * p_.K + k] = acc;
      }
  }

 private:
  LinearParams p_;
};

template <class T>
class LinearBwdWeight final : public Kernel {
 public:
  explicit LinearBwdWeight(LinearParams p) : p_(p) {}
  const char* name() const override { return "ref.linear_bwd_weight"; }
  void run(const StepContext&) override {
    const T* x = in<T>(0);
    const T* dy = in<T>(1);
    T* dw = out<T>(0);
    T* db = p_.bias ? out<T>(1) : nullptr;
    for (int64_t n = 0; n < p_.N; ++n) {
      for (int64_t k = 0; k < p_.K; ++k) {
        T acc = 0;
        for (int64_t m = 0; m < p_.M; ++m) acc += dy[m * p_.N + n] * x[m * p_.K + k];
        dw[n * p_.K + k] = acc;
      }
      if (db) {
        T acc = 0;
        for (int64_t m = 0; m < p_.M; ++m) acc += dy[m * p_.N + n];
        db[n] = acc;
      }
    }
  }

 private:
  LinearParams p_;
};

// in: a, b   out: c[B,M,N] = op(a) op(b) per batch (see MatmulParams).
// An operand with a_batch/b_batch == 1 is the same matrix for every batch.
template <class T>
class Matmul final : public Kernel {
 public:
  explicit Matmul(MatmulParams p) : p_(p) {}
  const char* name() const override { return "ref.matmul"; }
  void run(const StepContext&) override {
    const int64_t M = p_.M, N = p_.N, K = p_.K;
    // Strides of op(a)[m, k] and op(b)[k, n] in memory.
    const int64_t am = p_.trans_a ? 1 : K, ak = p_.trans_a ? M : 1;
    const int64_t bk = p_.trans_b ? 1 : N, bn = p_.trans_b ? K : 1;
    const bool a_bcast = p_.a_batch == 1, b_bcast = p_.b_batch == 1;
    for (int64_t bt = 0; bt < p_.B; ++bt) {
      const T* a = in<T>(0) + (a_bcast ? 0 : bt * M * K);
      const T* b = in<T>(1) + (b_bcast ? 0 : bt * K * N);
      T* c = out<T>(0) + bt * M * N;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double acc = 0;  // double whatever T is, as the conv oracle
          for (int64_t k = 0; k < K; ++k)
            acc += static_cast<double>(a[m * am + k * ak]) * static_cast<double>(b[k * bk + n * bn]);
          c[m * N + n] = static_cast<T>(acc);
        }
    }
  }

 private:
  MatmulParams p_;
};

}  // namespace memfit::kernels::ref
