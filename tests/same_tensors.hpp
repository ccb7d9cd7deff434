// Two safetensors files hold the same tensors, byte for byte (resume tests).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "io/safetensors.hpp"

namespace memfit::testing {

inline void expect_same_tensors(const std::string& a, const std::string& b) {
  auto fa = memfit::io::SafetensorsFile::load(a);
  auto fb = memfit::io::SafetensorsFile::load(b);
  ASSERT_EQ(fa.names(), fb.names());
  for (const auto& name : fa.names()) {
    const auto& ta = fa.at(name);
    const auto& tb = fb.at(name);
    ASSERT_EQ(ta.nbytes(), tb.nbytes()) << name;
    EXPECT_EQ(std::memcmp(fa.data(ta), fb.data(tb), ta.nbytes()), 0) << name << " differs after resume";
  }
}

}  // namespace memfit::testing
