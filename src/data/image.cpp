#include "data/image.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <cerrno>
#include <cmath>
#include <algorithm>
#include <stdexcept>

#include <png.h>
// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>
#include <jerror.h>

namespace memfit::data {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

std::string too_large(uint64_t w, uint64_t h, uint64_t max_pixels) {
  return "image is " + std::to_string(w) + "x" + std::to_string(h) + ", larger than the " +
         std::to_string(max_pixels) + "-pixel limit (raise the image folder's max_pixels)";
}

// ---- PNG: libpng's simplified API does palette/16-bit/alpha for us. --------

Image8 decode_png(const std::string& path, std::FILE* fp, const DecodeRequest& req) {
  png_image img;
  std::memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_stdio(&img, fp))
    fail(path, std::string("corrupt or unreadable PNG: ") + img.message);
  Image8 out;
  // A color file wanted as gray is decoded as RGB and reduced with memfit's
  // luma (libpng would convert in linear light instead).
  const bool decode_rgb = (img.format & PNG_FORMAT_FLAG_COLOR) != 0;
  img.format = decode_rgb ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  if (img.width > uint32_t(kMaxImageSide) || img.height > uint32_t(kMaxImageSide) ||
      uint64_t(img.width) * img.height > req.max_pixels) {
    const std::string msg = too_large(img.width, img.height, req.max_pixels);
    png_image_free(&img);
    fail(path, msg);
  }
  out.width = int(img.width);
  out.height = int(img.height);
  out.channels = decode_rgb ? 3 : 1;
  try {
    out.pixels.resize(size_t(img.width) * img.height * out.channels);
  } catch (...) {
    png_image_free(&img);
    throw;
  }
  png_color black{0, 0, 0};
  if (!png_image_finish_read(&img, &black, out.pixels.data(), 0, nullptr)) {
    const std::string msg = img.message;
    png_image_free(&img);
    fail(path, "corrupt PNG: " + msg);
  }
  return out;
}

// ---- JPEG: libjpeg reports fatal errors through longjmp. -------------------
// Only C objects live in decode_jpeg_c's frame between setjmp and longjmp; the
// output vector belongs to the caller, so no destructor is skipped.

struct JpegError {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

extern "C" void memfit_jpeg_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings are silent, except those that mean the data ran out: libjpeg
// would pad the image with gray and carry on, memfit calls the file corrupt.
extern "C" void memfit_jpeg_emit_message(j_common_ptr cinfo, int level) {
  if (level != -1) return;  // trace messages
  const int code = cinfo->err->msg_code;
  if (code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER) memfit_jpeg_error_exit(cinfo);
  cinfo->err->num_warnings++;
}

enum class JpegStatus { Ok, Error, TooLarge, Cmyk };

JpegStatus decode_jpeg_c(std::FILE* fp, const DecodeRequest& req, Image8& out, char* msg,
                         size_t msg_len) {
  jpeg_decompress_struct cinfo;
  JpegError jerr;
  cinfo.err = jpeg_std_error(&jerr.pub);
  jerr.pub.error_exit = memfit_jpeg_error_exit;
  jerr.pub.emit_message = memfit_jpeg_emit_message;
  jerr.message[0] = '\0';
  if (setjmp(jerr.jump)) {
    std::snprintf(msg, msg_len, "%s", jerr.message);
    jpeg_destroy_decompress(&cinfo);
    return JpegStatus::Error;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_stdio_src(&cinfo, fp);
  jpeg_read_header(&cinfo, TRUE);
  // Bound what libjpeg itself allocates, from the header, before decoding: a
  // progressive (or multi-scan) file keeps every DCT coefficient of the
  // full-size image (2 bytes per sample) whatever the output scale.
  const uint64_t limit = jpeg_memory_limit(req.max_pixels);
  cinfo.mem->max_memory_to_use = long(std::min<uint64_t>(limit, uint64_t(LONG_MAX)));
  if (cinfo.image_width > unsigned(kMaxImageSide) || cinfo.image_height > unsigned(kMaxImageSide)) {
    std::snprintf(msg, msg_len, "%s", too_large(cinfo.image_width, cinfo.image_height, req.max_pixels).c_str());
    jpeg_destroy_decompress(&cinfo);
    return JpegStatus::TooLarge;
  }
  if (jpeg_has_multiple_scans(&cinfo)) {
    uint64_t coef = 0;
    for (int c = 0; c < cinfo.num_components; ++c)
      coef += uint64_t(cinfo.comp_info[c].width_in_blocks) * cinfo.comp_info[c].height_in_blocks * DCTSIZE2 *
              sizeof(JCOEF);
    if (coef > limit) {
      std::snprintf(msg, msg_len,
                    "progressive JPEG of %ux%u needs %llu bytes of decoder memory, over the %llu-byte limit "
                    "(raise the image folder's max_pixels, or save it as baseline JPEG or PNG)",
                    cinfo.image_width, cinfo.image_height, static_cast<unsigned long long>(coef),
                    static_cast<unsigned long long>(limit));
      jpeg_destroy_decompress(&cinfo);
      return JpegStatus::TooLarge;
    }
  }
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&cinfo);
    return JpegStatus::Cmyk;
  }
  const bool gray_src = cinfo.jpeg_color_space == JCS_GRAYSCALE;
  cinfo.out_color_space = (gray_src || req.channels == 1) ? JCS_GRAYSCALE : JCS_RGB;
  // Shrink in the DCT (1/2, 1/4, 1/8) while the result stays >= the target:
  // cheaper and smaller than decoding at full size and averaging.
  cinfo.scale_num = 1;
  cinfo.scale_denom = 1;
  if (req.min_width > 0 && req.min_height > 0) {
    for (unsigned d = 8; d > 1; d /= 2) {
      const uint64_t w = (uint64_t(cinfo.image_width) + d - 1) / d;
      const uint64_t h = (uint64_t(cinfo.image_height) + d - 1) / d;
      if (w >= uint64_t(req.min_width) && h >= uint64_t(req.min_height)) {
        cinfo.scale_denom = d;
        break;
      }
    }
  }
  jpeg_calc_output_dimensions(&cinfo);
  const uint64_t w = cinfo.output_width, h = cinfo.output_height;
  if (w * h > req.max_pixels) {
    std::snprintf(msg, msg_len, "%s", too_large(w, h, req.max_pixels).c_str());
    jpeg_destroy_decompress(&cinfo);
    return JpegStatus::TooLarge;
  }
  out.width = int(w);
  out.height = int(h);
  out.channels = cinfo.out_color_space == JCS_GRAYSCALE ? 1 : 3;
  try {
    out.pixels.resize(size_t(w) * h * out.channels);
  } catch (...) {
    jpeg_destroy_decompress(&cinfo);
    throw;
  }
  jpeg_start_decompress(&cinfo);
  const size_t stride = size_t(w) * out.channels;
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out.pixels.data() + size_t(cinfo.output_scanline) * stride;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return JpegStatus::Ok;
}

Image8 decode_jpeg(const std::string& path, std::FILE* fp, const DecodeRequest& req) {
  Image8 out;
  char msg[JMSG_LENGTH_MAX + 128];
  msg[0] = '\0';
  const JpegStatus s = decode_jpeg_c(fp, req, out, msg, sizeof msg);
  switch (s) {
    case JpegStatus::Ok:
      return out;
    case JpegStatus::Cmyk:
      fail(path, "CMYK JPEG is not supported: convert it to RGB");
    case JpegStatus::TooLarge:
      fail(path, msg);
    case JpegStatus::Error:
      break;
  }
  fail(path, std::string("corrupt JPEG: ") + msg);
}

struct File {
  std::FILE* f = nullptr;
  ~File() {
    if (f) std::fclose(f);
  }
};

// ---- Resampling -------------------------------------------------------------

// For each output index o along one axis, K source indices and weights.
struct Taps {
  int K = 0;
  std::vector<int> idx;
  std::vector<float> w;
};

Taps make_taps(int src, int dst) {
  Taps t;
  const double scale = double(src) / double(dst);
  if (scale > 2.0) {  // area: average the source span [o*scale, (o+1)*scale)
    t.K = int(std::ceil(scale)) + 1;
    t.idx.assign(size_t(dst) * t.K, 0);
    t.w.assign(size_t(dst) * t.K, 0.0f);
    for (int o = 0; o < dst; ++o) {
      const double a = o * scale, b = std::min(double(src), (o + 1) * scale);
      const int first = int(std::floor(a));
      for (int k = 0; k < t.K; ++k) {
        const int i = first + k;
        const double lo = std::max(a, double(i)), hi = std::min(b, double(i) + 1.0);
        t.idx[size_t(o) * t.K + k] = std::min(i, src - 1);
        t.w[size_t(o) * t.K + k] = hi > lo ? float((hi - lo) / scale) : 0.0f;
      }
    }
  } else {  // bilinear, half-pixel centres, clamped at the edges
    t.K = 2;
    t.idx.assign(size_t(dst) * 2, 0);
    t.w.assign(size_t(dst) * 2, 0.0f);
    for (int o = 0; o < dst; ++o) {
      double s = (o + 0.5) * scale - 0.5;
      if (s < 0) s = 0;
      int i0 = int(std::floor(s));
      double l = s - i0;
      if (i0 >= src - 1) {
        i0 = src - 1;
        l = 0;
      }
      t.idx[size_t(o) * 2] = i0;
      t.idx[size_t(o) * 2 + 1] = std::min(i0 + 1, src - 1);
      t.w[size_t(o) * 2] = float(1.0 - l);
      t.w[size_t(o) * 2 + 1] = float(l);
    }
  }
  return t;
}

}  // namespace

Image8 decode_image(const std::string& path, const DecodeRequest& req) {
  if (req.channels != 1 && req.channels != 3)
    throw std::invalid_argument("decode_image: channels must be 1 or 3");
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is then refused.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open image: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, "not a regular file (a FIFO, device, socket or directory): not an image");
  }
  File file;
  file.f = ::fdopen(fd, "rb");
  if (!file.f) {
    ::close(fd);
    fail(path, std::string("cannot open image: ") + std::strerror(errno));
  }
  unsigned char magic[8] = {0};
  const size_t n = std::fread(magic, 1, sizeof magic, file.f);
  static const unsigned char kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (n == 8 && std::memcmp(magic, kPng, 8) == 0) {
    std::rewind(file.f);
    return decode_png(path, file.f, req);
  }
  if (n >= 3 && magic[0] == 0xff && magic[1] == 0xd8 && magic[2] == 0xff) {
    std::rewind(file.f);
    return decode_jpeg(path, file.f, req);
  }
  if (n == 0) fail(path, "empty image file");
  fail(path, "not a PNG or JPEG file (unknown signature): corrupt or mislabelled");
}

size_t resize_scratch_bytes(int sw, int sc, int dh, int dw) {
  // one float row of the source width, tap tables (at most ceil(scale)+1 taps
  // per output, so at most src + 2*dst entries of int+float per axis).
  return size_t(sw) * sc * sizeof(float) +
         (size_t(kMaxImageSide) * 2 + 2 * size_t(dh + dw)) * (sizeof(int) + sizeof(float));
}

void resize_to_chw(const uint8_t* src, int sh, int sw, int sc, int dh, int dw, int dc,
                   const Normalize& norm, float* out) {
  if (sh <= 0 || sw <= 0 || dh <= 0 || dw <= 0 || (sc != 1 && sc != 3) || (dc != 1 && dc != 3))
    throw std::invalid_argument("resize_to_chw: bad sizes or channel counts");
  const Taps tv = make_taps(sh, dh), th = make_taps(sw, dw);
  std::vector<float> row(size_t(sw) * sc);  // vertical pass of one output row
  float mean[3], inv[3];
  for (int c = 0; c < dc; ++c) {
    mean[c] = norm.mean_at(c);
    inv[c] = 1.0f / (255.0f * norm.std_at(c));
  }
  const size_t plane = size_t(dh) * dw;
  const size_t stride = size_t(sw) * sc;
  for (int oy = 0; oy < dh; ++oy) {
    std::fill(row.begin(), row.end(), 0.0f);
    for (int k = 0; k < tv.K; ++k) {
      const float wk = tv.w[size_t(oy) * tv.K + k];
      if (wk == 0.0f) continue;
      const uint8_t* s = src + size_t(tv.idx[size_t(oy) * tv.K + k]) * stride;
      for (size_t x = 0; x < stride; ++x) row[x] += wk * float(s[x]);
    }
    for (int ox = 0; ox < dw; ++ox) {
      float v[3] = {0, 0, 0};
      for (int k = 0; k < th.K; ++k) {
        const float wk = th.w[size_t(ox) * th.K + k];
        if (wk == 0.0f) continue;
        const float* p = row.data() + size_t(th.idx[size_t(ox) * th.K + k]) * sc;
        for (int c = 0; c < sc; ++c) v[c] += wk * p[c];
      }
      const size_t o = size_t(oy) * dw + ox;
      if (sc == dc) {
        for (int c = 0; c < dc; ++c) out[c * plane + o] = (v[c] - 255.0f * mean[c]) * inv[c];
      } else if (sc == 3) {  // RGB -> gray
        const float y = 0.299f * v[0] + 0.587f * v[1] + 0.114f * v[2];
        out[o] = (y - 255.0f * mean[0]) * inv[0];
      } else {  // gray -> RGB
        for (int c = 0; c < 3; ++c) out[c * plane + o] = (v[0] - 255.0f * mean[c]) * inv[c];
      }
    }
  }
}

}  // namespace memfit::data
