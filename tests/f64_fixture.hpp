// A golden fixture of F64 tensors (tests/golden/make_*_golden.py) read by
// name, for the op tests that compare against PyTorch's float64 results.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "memfit/graph.hpp"

namespace memfit::testing {

struct F64Fixture {
  io::SafetensorsFile f;
  // tests/golden/<file>
  static F64Fixture open(const std::string& file) {
    return {io::SafetensorsFile::load(std::string(MEMFIT_TEST_DATA) + "/golden/" + file)};
  }
  // The tensor's values (and its shape, if asked); a tensor that is not F64
  // fails the test.
  std::vector<double> get(const std::string& name, Shape* shape = nullptr) const {
    const io::TensorInfo& t = f.at(name);
    EXPECT_EQ(t.dtype, io::DType::F64) << name;
    std::vector<double> v(static_cast<size_t>(t.numel()));
    std::memcpy(v.data(), f.data(t), v.size() * sizeof(double));
    if (shape) *shape = t.shape;
    return v;
  }
};

}  // namespace memfit::testing
