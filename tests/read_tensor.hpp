// A fixture tensor's values (golden tests): the safetensors entry `name`
// of f copied out as T, failing the test if its byte size is not n * sizeof(T).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "io/safetensors.hpp"

namespace memfit::testing {

template <class T>
std::vector<T> read_tensor(const io::SafetensorsFile& f, const std::string& name) {
  const io::TensorInfo& t = f.at(name);
  std::vector<T> v(static_cast<size_t>(t.numel()));
  EXPECT_EQ(t.nbytes(), v.size() * sizeof(T)) << name;
  std::memcpy(v.data(), f.data(t), t.nbytes());
  return v;
}

}  // namespace memfit::testing
