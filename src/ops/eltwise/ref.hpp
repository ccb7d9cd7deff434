// Scalar reference kernels for element-wise ops (the test oracle).
// T is float or double (double for gradient checks).
#pragma once

#include "kernels/kernel.hpp"
#include "ops/eltwise/params.hpp"

namespace memfit::kernels::ref {

template <class T>
class Relu final : public Kernel {
 public:
  explicit Relu(EltwiseParams p) : p_(p) {}
  const char* name() const override { return "ref.relu"; }
  void run(const StepContext&) override {
    const T* x = in<T>(0);
    T* y = out<T>(0);
    for (int64_t i = 0; i < p_.n; ++i) y[i] = x[i] > T(0) ? x[i] : T(0);
  }

 private:
  EltwiseParams p_;
};

template <class T>
class ReluBwd final : public Kernel {
 public:
  explicit ReluBwd(EltwiseParams p) : p_(p) {}
  const char* name() const override { return "ref.relu_bwd"; }
  void run(const StepContext&) override {
    const T* y = in<T>(0);
    const T* dy = in<T>(1);
    T* dx = out<T>(0);
    for (int64_t i = 0; i < p_.n; ++i) dx[i] = y[i] > T(0) ? dy[i] : T(0);
  }

 private:
  EltwiseParams p_;
};

template <class T>
class Add final : public Kernel {
 public:
  explicit Add(EltwiseParams p) : p_(p) {}
  const char* name() const override { return "ref.add"; }
  void run(const StepContext&) override {
    const T* a = in<T>(0);
    const T* b = in<T>(1);
    T* y = out<T>(0);
    for (int64_t i = 0; i < p_.n; ++i) y[i] = a[i] + b[i];
  }

 private:
  EltwiseParams p_;
};

template <class T>
class Scale final : public Kernel {
 public:
  explicit Scale(EltwiseParams p) : p_(p) {}
  const char* name() const override { return "ref.scale"; }
  void run(const StepContext&) override {
    const T* x = in<T>(0);
    T* y = out<T>(0);
    for (int64_t i = 0; i < p_.n; ++i) y[i] = static_cast<T>(p_.alpha) * x[i];
  }

 private:
  EltwiseParams p_;
};

template <class T>
class Fill final : public Kernel {
 public:
  explicit Fill(FillParams p) : p_(p) {}
  const char* name() const override { return "ref.fill"; }
  void run(const StepContext&) override {
    T* y = out<T>(0);
    for (int64_t i = 0; i < p_.n; ++i) y[i] = static_cast<T>(p_.value);
  }

 private:
  FillParams p_;
};

}  // namespace memfit::kernels::ref
