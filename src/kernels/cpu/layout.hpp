// How a CPU kernel stores a 4-D activation [N, C, H, W] in its buffer.
//
// Plain: row-major NCHW, the graph's own layout.
// Blocked16: oneDNN's nChw16c, [N][C/16][H][W][16] (C a multiple of 16): the
// layout oneDNN's f32 convolutions compute in on AVX-512. Convolutions,
// batch norm, global average pooling and the element-wise ops can all keep
// their activations in it, so that a chain of them never reorders; the
// lowering (runtime/lower_cpu/layout.hpp) decides which values are blocked.
// The buffer's size is the same in both layouts. bf16 activations
// (ElemType::BF16) use the same element order with 2-byte elements: oneDNN's
// bf16 convolutions compute in nChw16c as well.
#pragma once

#include <cstdint>

namespace memfit::kernels::cpu {

enum class Layout : uint8_t { Plain, Blocked16 };
constexpr int64_t kChannelBlock = 16;

// Offset of element (n, c, i) (i the flat spatial index) of an [N, C, HW]
// tensor in the given layout.
inline int64_t offset_of(Layout l, int64_t C, int64_t HW, int64_t n, int64_t c, int64_t i) {
  if (l == Layout::Plain) return (n * C + c) * HW + i;
  const int64_t cb = c / kChannelBlock, j = c % kChannelBlock;
  return ((n * (C / kChannelBlock) + cb) * HW + i) * kChannelBlock + j;
}

}  // namespace memfit::kernels::cpu
