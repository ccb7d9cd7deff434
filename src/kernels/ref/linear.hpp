// Scalar reference kernels for linear and batched matmul.
// M rows, K input features, N output features.
#pragma once

#include "kernels/kernel.hpp"
#include "kernels/params.hpp"

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

}  // namespace memfit::kernels::ref
