// Helpers shared by the kernel tests (test_cpu_kernels, test_cpu_bf16):
// convolution cases and their names, seeded random data, and reordering test data between the
// plain NCHW layout and the channel-blocked one (kernels/cpu/layout.hpp).
#pragma once

#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/layout.hpp"

namespace memfit::testing {

// One convolution: N batch, C in / K out channels, H x W input, R x S kernel.
struct ConvCase {
  int64_t N, C, H, W, K, R, S;
  int64_t stride = 1, pad = 0, dil = 1, groups = 1;
  bool bias = true;
};

inline std::string conv_str(const ConvCase& c) {
  std::ostringstream o;
  o << "N" << c.N << " C" << c.C << " " << c.H << "x" << c.W << " K" << c.K << " " << c.R << "x" << c.S << " s"
    << c.stride << " p" << c.pad << " d" << c.dil << " g" << c.groups << (c.bias ? " bias" : "");
  return o.str();
}

// n floats uniform in [lo, hi) from a seeded generator.
inline std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> U(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = U(gen);
  return v;
}

// [N, C, HW] plain -> blocked (C a multiple of 16), and back.
inline std::vector<float> to_blocked(const std::vector<float>& p, int64_t N, int64_t C, int64_t HW) {
  using kernels::cpu::Layout;
  std::vector<float> b(p.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < HW; ++i)
        b[static_cast<size_t>(kernels::cpu::offset_of(Layout::Blocked16, C, HW, n, c, i))] =
            p[static_cast<size_t>((n * C + c) * HW + i)];
  return b;
}

inline std::vector<float> to_plain(const std::vector<float>& b, int64_t N, int64_t C, int64_t HW) {
  using kernels::cpu::Layout;
  std::vector<float> p(b.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < HW; ++i)
        p[static_cast<size_t>((n * C + c) * HW + i)] =
            b[static_cast<size_t>(kernels::cpu::offset_of(Layout::Blocked16, C, HW, n, c, i))];
  return p;
}

}  // namespace memfit::testing
