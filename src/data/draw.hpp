// Integer draws for the data layer, built on memfit::rng so every draw is a
// pure function of (key, i). Python reproduces them as
//   hi = splitmix64(key + 2*i) >> 40; lo = splitmix64(key + 2*i + 1) >> 40
//   r48 = (hi << 24) | lo;  below(n) = (r48 * n) >> 48
#pragma once

#include <cstdint>

#include "memfit/rng.hpp"

namespace memfit::data::detail {

// Stream ids of the data layer's random streams.
inline const uint64_t kShuffleStream = rng::name_hash("data.shuffle");
inline const uint64_t kAugmentStream = rng::name_hash("data.augment");
inline const uint64_t kSubsetStream = rng::name_hash("data.subset");

// 48 random bits: element i of the stream made of two 24-bit uniform01 draws.
inline uint64_t draw48(uint64_t key, uint64_t i) {
  const uint64_t hi = uint64_t(rng::uniform01(key, 2 * i) * 16777216.0f);
  const uint64_t lo = uint64_t(rng::uniform01(key, 2 * i + 1) * 16777216.0f);
  return (hi << 24) | lo;
}

// Uniform integer in [0, n), exact fixed-point (no float rounding), bias
// below n / 2^48.
inline uint64_t draw_below(uint64_t key, uint64_t i, uint64_t n) {
  return uint64_t((unsigned __int128)draw48(key, i) * n >> 48);
}

}  // namespace memfit::data::detail
