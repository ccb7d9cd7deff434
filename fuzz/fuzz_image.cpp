// PNG and JPEG decoding (the content picks the decoder) with a small pixel
// limit, then the resize the image folder applies.
#include <vector>

#include "data/image.hpp"
#include "fuzz/harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = memfit::fuzz::input_file(data, size);
  for (int channels : {1, 3}) {
    memfit::fuzz::run_one([&] {
      memfit::data::DecodeRequest req;
      req.channels = channels;
      req.min_height = 8;
      req.min_width = 8;
      req.max_pixels = 1u << 20;
      const memfit::data::Image8 img = memfit::data::decode_image(path, req);
      std::vector<float> out(size_t(8) * 8 * channels);
      memfit::data::resize_to_chw(img.pixels.data(), img.height, img.width, img.channels, 8, 8, channels,
                                  memfit::data::Normalize{}, out.data());
    });
  }
  return 0;
}

// ---- seeds: small PNGs and JPEGs (baseline, progressive, gray) -------------
#include <jpeglib.h>
#include <png.h>

#include <cstdio>
#include <string>

namespace {

std::vector<uint8_t> pattern(int w, int h, int c) {
  std::vector<uint8_t> p(size_t(w) * h * c);
  for (size_t i = 0; i < p.size(); ++i) p[i] = uint8_t(i * 37 + (i / 7) * 11);
  return p;
}

void write_png(const std::string& path, int w, int h, png_uint_32 format) {
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  img.width = png_uint_32(w);
  img.height = png_uint_32(h);
  img.format = format;
  const auto px = pattern(w, h, int(PNG_IMAGE_PIXEL_CHANNELS(format)));
  if (!png_image_write_to_file(&img, path.c_str(), 0, px.data(), 0, nullptr)) std::abort();
}

void write_jpeg(const std::string& path, int w, int h, int c, bool progressive) {
  jpeg_compress_struct ci;
  jpeg_error_mgr err;
  ci.err = jpeg_std_error(&err);
  jpeg_create_compress(&ci);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  jpeg_stdio_dest(&ci, f);
  ci.image_width = JDIMENSION(w);
  ci.image_height = JDIMENSION(h);
  ci.input_components = c;
  ci.in_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&ci);
  jpeg_set_quality(&ci, 75, TRUE);
  if (progressive) jpeg_simple_progression(&ci);
  jpeg_start_compress(&ci, TRUE);
  const auto px = pattern(w, h, c);
  while (ci.next_scanline < ci.image_height) {
    JSAMPROW row = const_cast<JSAMPLE*>(px.data() + size_t(ci.next_scanline) * w * c);
    jpeg_write_scanlines(&ci, &row, 1);
  }
  jpeg_finish_compress(&ci);
  jpeg_destroy_compress(&ci);
  std::fclose(f);
}

}  // namespace

extern "C" int memfit_fuzz_write_seed(const char* dir) {
  const std::string d = dir;
  write_png(d + "/gray.png", 9, 7, PNG_FORMAT_GRAY);
  write_png(d + "/rgb.png", 12, 10, PNG_FORMAT_RGB);
  write_png(d + "/rgba.png", 5, 6, PNG_FORMAT_RGBA);
  write_jpeg(d + "/baseline.jpg", 16, 12, 3, false);
  write_jpeg(d + "/progressive.jpg", 16, 12, 3, true);
  write_jpeg(d + "/gray.jpg", 9, 7, 1, false);
  write_jpeg(d + "/large.jpg", 80, 64, 3, false);
  return 0;
}
