// Scalar reference kernels of add_broadcast, expand_leading and sum_leading
// (ops/broadcast/params.hpp); T is float or double. Sums in double.
#pragma once

#include <vector>

#include "kernels/kernel.hpp"
#include "ops/broadcast/params.hpp"

namespace memfit::kernels::ref {

template <class T>
class AddBroadcast final : public Kernel {
 public:
  explicit AddBroadcast(BroadcastParams p) : p_(p) {}
  const char* name() const override { return "ref.add_broadcast"; }
  void run(const StepContext&) override {
    const T* a = in<T>(0);
    const T* b = in<T>(1);
    T* y = out<T>(0);
    for (int64_t r = 0; r < p_.R; ++r)
      for (int64_t s = 0; s < p_.S; ++s) y[r * p_.S + s] = a[r * p_.S + s] + b[s];
  }

 private:
  BroadcastParams p_;
};

template <class T>
class ExpandLeading final : public Kernel {
 public:
  explicit ExpandLeading(BroadcastParams p) : p_(p) {}
  const char* name() const override { return "ref.expand_leading"; }
  void run(const StepContext&) override {
    const T* x = in<T>(0);
    T* y = out<T>(0);
    for (int64_t r = 0; r < p_.R; ++r)
      for (int64_t s = 0; s < p_.S; ++s) y[r * p_.S + s] = x[s];
  }

 private:
  BroadcastParams p_;
};

template <class T>
class SumLeading final : public Kernel {
 public:
  explicit SumLeading(BroadcastParams p) : p_(p) {}
  const char* name() const override { return "ref.sum_leading"; }
  void run(const StepContext&) override {
    const T* x = in<T>(0);
    T* y = out<T>(0);
    for (int64_t s = 0; s < p_.S; ++s) {
      double acc = 0;
      for (int64_t r = 0; r < p_.R; ++r) acc += static_cast<double>(x[r * p_.S + s]);
      y[s] = static_cast<T>(acc);
    }
  }

 private:
  BroadcastParams p_;
};

}  // namespace memfit::kernels::ref
