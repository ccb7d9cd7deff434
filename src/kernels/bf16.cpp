#include "kernels/bf16.hpp"

#include <type_traits>

namespace memfit::kernels {
namespace {

// out[i] = one(in[i]) for i in [0, n), sixteen at a time with vec16(in, out)
// first where the target has the instructions (vec16 = nullptr otherwise).
template <auto vec16, class In, class Out, class One>
void convert(const In* in, Out* out, size_t n, One one) {
  size_t i = 0;
  if constexpr (!std::is_null_pointer_v<decltype(vec16)>)
    for (; i + 16 <= n; i += 16) vec16(in + i, out + i);
  for (; i < n; ++i) out[i] = one(in[i]);
}

// The AVX-512 forms are the masked ones with a full mask: they compile to
// the plain instructions, while the plain intrinsics' _mm512_undefined trips
// GCC 12's -Wmaybe-uninitialized.
#if defined(__AVX512F__)
constexpr __mmask16 kAll = 0xffff;
__m256i load16(const uint16_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
void store16(uint16_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
void bf16_widen16(const bf16_t* in, float* out) {
  const __m512i u = _mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, load16(in)), 16);
  _mm512_storeu_ps(out, _mm512_castsi512_ps(u));
}
void f16_widen16(const f16_t* in, float* out) { _mm512_storeu_ps(out, _mm512_maskz_cvtph_ps(kAll, load16(in))); }
void f16_narrow16(const float* in, f16_t* out) {
  store16(out, _mm512_maskz_cvtps_ph(kAll, _mm512_loadu_ps(in), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
#else
constexpr std::nullptr_t bf16_widen16 = nullptr, f16_widen16 = nullptr, f16_narrow16 = nullptr;
#endif
#if defined(__AVX512BF16__)
void bf16_narrow16(const float* in, bf16_t* out) { store16(out, (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(in))); }
#else
constexpr std::nullptr_t bf16_narrow16 = nullptr;
#endif

}  // namespace

void bf16_to_f32(const bf16_t* in, float* out, size_t n) {
  convert<bf16_widen16>(in, out, n, [](bf16_t h) { return bf16_to_f32(h); });
}
void f32_to_bf16(const float* in, bf16_t* out, size_t n) {
  convert<bf16_narrow16>(in, out, n, [](float f) { return f32_to_bf16(f); });
}
void f16_to_f32(const f16_t* in, float* out, size_t n) {
  convert<f16_widen16>(in, out, n, [](f16_t h) { return f16_to_f32(h); });
}
void f32_to_f16(const float* in, f16_t* out, size_t n) {
  convert<f16_narrow16>(in, out, n, [](float f) { return f32_to_f16(f); });
}

}  // namespace memfit::kernels
