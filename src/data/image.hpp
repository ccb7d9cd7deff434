// memfit image decoding (PNG via libpng, JPEG via libjpeg) and resizing.
//
// Decoders produce 8-bit interleaved HWC pixels with 1 (gray) or 3 (RGB)
// channels: the fewest that represent the file and the requested output, so
// memory stays at one byte per stored channel. The file's content (magic
// bytes), not its name, picks the decoder. Errors are std::runtime_error
// naming the file.
//
// Resizing follows PyTorch's interpolate(..., align_corners=False): half-pixel
// centres, bilinear when shrinking by at most 2x or enlarging, and area
// averaging (mode="area") when shrinking by more than 2x along an axis, where
// bilinear would skip pixels and alias.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.hpp"

namespace memfit::data {

struct DecodeRequest {
  int channels = 3;           // channels the caller will produce (1 or 3)
  int min_height = 0;         // JPEG only: the decoder may shrink by 2/4/8 in
  int min_width = 0;          //   the DCT while staying at least this large
  uint64_t max_pixels = 1ull << 25;  // refuse larger images (memory guard)
};

struct Image8 {
  int height = 0, width = 0, channels = 0;  // channels: 1 or 3
  std::vector<uint8_t> pixels;              // height*width*channels, HWC
};

// Decodes a PNG or JPEG file. Alpha is composited onto black; 16-bit PNGs are
// reduced to 8 bits; CMYK JPEGs are rejected. Refuses, before decoding, what
// is not a regular file (a FIFO is opened without blocking) and images whose
// header declares more than max_pixels (or, progressive JPEG, more decoder
// memory than jpeg_memory_limit).
Image8 decode_image(const std::string& path, const DecodeRequest& req);

// Largest side memfit decodes (JPEG's own limit is 65500).
inline constexpr int kMaxImageSide = 65535;

// Most memory libjpeg may allocate for its own buffers while decoding one
// image of a request with this max_pixels (libjpeg's max_memory_to_use; a
// progressive JPEG whose coefficients need more is refused from its header).
inline uint64_t jpeg_memory_limit(uint64_t max_pixels) { return max_pixels * 3; }

// Resizes an 8-bit HWC image with sc channels (1 or 3) to dh x dw and writes
// dc channels (1 or 3) as CHW float, out = (v/255 - mean[c]) / std[c].
// sc=3 -> dc=1 uses the ITU-R 601 luma 0.299 R + 0.587 G + 0.114 B (as PIL
// "L" and JPEG's Y); sc=1 -> dc=3 replicates. Allocates two small rows
// (sw*sc floats and the tap tables).
void resize_to_chw(const uint8_t* src, int sh, int sw, int sc, int dh, int dw, int dc,
                   const Normalize& norm, float* out_chw);

// Bytes resize_to_chw allocates for a source of width sw with sc channels.
size_t resize_scratch_bytes(int sw, int sc, int dh, int dw);

}  // namespace memfit::data
