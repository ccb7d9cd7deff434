// Counter-based random numbers: every random draw in memfit (parameter init,
// dropout masks, data shuffling, augmentation) is a pure function of
// (seed, stream, index). Nothing carries hidden state, so a run resumes
// exactly from (seed, step), and tests/golden/make_golden.py reproduces the
// same numbers in numpy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

// The generator's arithmetic also runs in CUDA kernels (dropout masks on a
// GPU draw exactly the CPU's): those functions are host and device code.
#ifdef __CUDACC__
#define MEMFIT_HD __host__ __device__
#else
#define MEMFIT_HD
#endif

namespace memfit::rng {

MEMFIT_HD inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  uint64_t z = x;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A 32-bit integer hash (two multiply-xorshift rounds, "lowbias32"): cheap
// random bits for vectorised loops (32-bit multiplies), as the stochastic
// rounding of bf16 optimizer state draws them per element.
MEMFIT_HD inline uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// 64-bit FNV-1a: folds n bytes into h (start from kFnvOffset). Also the
// checksum of checkpoints and the key of dataset cache files.
inline constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
inline uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

// FNV-1a of a name: turns a parameter or layer name into a stream id.
inline uint64_t name_hash(std::string_view s) { return fnv1a(kFnvOffset, s.data(), s.size()); }

// Key of one random stream: (seed, stream id, counter such as the step).
MEMFIT_HD inline uint64_t stream_key(uint64_t seed, uint64_t stream, uint64_t counter) {
  return splitmix64(splitmix64(seed ^ splitmix64(stream)) + counter);
}

// Element i of a stream as a uniform float in [0, 1) with 24 random bits.
// The 24 bits go through int32 (exact either way): AVX2 has no conversion
// from 64-bit integers, and a loop of draws converting from uint64 ran
// scalar there, 5.5x slower (dropout in attention: 150 ms of a gpt-char step).
MEMFIT_HD inline float uniform01(uint64_t key, uint64_t i) {
  return static_cast<float>(static_cast<int32_t>(splitmix64(key + i) >> 40)) * (1.0f / 16777216.0f);
}

// Uniform in [-bound, bound): used for PyTorch-style default initialisation
// (bound = 1/sqrt(fan_in) for conv/linear weights and biases).
MEMFIT_HD inline float uniform_sym(uint64_t key, uint64_t i, float bound) {
  return (2.0f * uniform01(key, i) - 1.0f) * bound;
}

}  // namespace memfit::rng
