// A named, typed tensor of one sample: what a dataset yields and a model
// reads ("image" f32 [C, H, W], "tokens" i32 [T], "labels" i32 []). A batch
// is the same tensors with the batch axis in front.
#pragma once

#include <string>
#include <vector>

#include "memfit/graph.hpp"

namespace memfit {

struct TensorSpec {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;  // per sample; {} for a scalar (a class label)
  // The value of the rows that pad a partial last batch: 0 for inputs, -1
  // for targets (losses and metrics skip a negative label).
  double pad = 0.0;
  // i32 tensors: the values lie in [0, range) (a vocabulary, the classes);
  // 0 where the data does not say.
  int64_t range = 0;

  size_t sample_bytes() const { return static_cast<size_t>(numel(shape)) * dtype_size(dtype); }
  bool operator==(const TensorSpec&) const = default;
};

// "image f32 [1,28,28]".
inline std::string describe(const TensorSpec& t) { return t.name + " " + dtype_name(t.dtype) + " " + shape_str(t.shape); }

inline std::string describe(const std::vector<TensorSpec>& ts) {
  std::string r;
  for (const TensorSpec& t : ts) r += (r.empty() ? "" : ", ") + describe(t);
  return r;
}

}  // namespace memfit
