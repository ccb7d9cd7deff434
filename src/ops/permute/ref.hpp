// Scalar reference kernel for permute (the test oracle): one element at a
// time in output order, the input offset kept by an odometer. T is the stored
// element type: float or double for float values, int32_t or uint8_t for
// integer ones (a pure copy, any type works).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/kernel.hpp"
#include "ops/permute/params.hpp"

namespace memfit::kernels::ref {

// in: x[dims]   out: y, y's axis k = x's axis perm[k]
template <class T>
class Permute final : public Kernel {
 public:
  explicit Permute(const PermuteParams& p) : out_dims_(p.perm.size()), src_stride_(p.perm.size()), idx_(p.perm.size()) {
    const size_t r = p.dims.size();
    std::vector<int64_t> stride(r, 1);
    for (size_t i = r; i-- > 1;) stride[i - 1] = stride[i] * p.dims[i];
    n_ = 1;
    for (size_t k = 0; k < r; ++k) {
      out_dims_[k] = p.dims[static_cast<size_t>(p.perm[k])];
      src_stride_[k] = stride[static_cast<size_t>(p.perm[k])];
      n_ *= out_dims_[k];
    }
  }
  const char* name() const override { return "ref.permute"; }
  void run(const StepContext&) override {
    const T* x = in<T>(0);
    T* y = out<T>(0);
    std::fill(idx_.begin(), idx_.end(), 0);
    int64_t off = 0;
    for (int64_t o = 0; o < n_; ++o) {
      y[o] = x[off];
      for (size_t k = idx_.size(); k-- > 0;) {  // the next output index
        off += src_stride_[k];
        if (++idx_[k] < out_dims_[k]) break;
        off -= src_stride_[k] * out_dims_[k];
        idx_[k] = 0;
      }
    }
  }

 private:
  std::vector<int64_t> out_dims_, src_stride_;
  std::vector<int64_t> idx_;  // the odometer, kept here so that run() allocates nothing
  int64_t n_;
};

}  // namespace memfit::kernels::ref
