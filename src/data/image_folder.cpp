#include "data/image_folder.hpp"

#include <cstdio>
#include <cstring>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <stdexcept>

#include "data/image.hpp"

namespace memfit::data {
namespace {

namespace fs = std::filesystem;

bool is_image_name(const std::string& name) {
  if (name.empty() || name[0] == '.') return false;
  const auto dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  std::string ext = name.substr(dot + 1);
  for (char& c : ext) c = char(std::tolower(static_cast<unsigned char>(c)));
  return ext == "png" || ext == "jpg" || ext == "jpeg";
}

}  // namespace

namespace {

// Width and height from an image's header without decoding it: PNG's IHDR,
// or JPEG's start-of-frame marker (segments before it are skipped by their
// lengths). False when the header cannot be read.
bool probe_size(const std::string& path, uint64_t& w, uint64_t& h) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  unsigned char b[24];
  bool ok = false;
  auto be16 = [&](const unsigned char* p) { return uint64_t(p[0]) << 8 | p[1]; };
  if (std::fread(b, 1, 2, f) == 2 && b[0] == 0x89 && b[1] == 'P') {
    if (std::fread(b + 2, 1, 22, f) == 22 && std::memcmp(b + 12, "IHDR", 4) == 0) {
      w = be16(b + 16) << 16 | be16(b + 18);
      h = be16(b + 20) << 16 | be16(b + 22);
      ok = true;
    }
  } else if (b[0] == 0xFF && b[1] == 0xD8) {
    for (int guard = 0; guard < 1000; ++guard) {
      int c = std::fgetc(f);
      while (c == 0xFF) c = std::fgetc(f);  // fill bytes
      if (c == EOF) break;
      if (c == 0xD8 || c == 0x01 || (c >= 0xD0 && c <= 0xD7)) continue;  // no length
      if (std::fread(b, 1, 2, f) != 2) break;
      const long len = long(be16(b));
      if (len < 2) break;
      if (c >= 0xC0 && c <= 0xCF && c != 0xC4 && c != 0xC8 && c != 0xCC) {
        if (std::fread(b, 1, 5, f) != 5) break;
        h = be16(b + 1);
        w = be16(b + 3);
        ok = true;
        break;
      }
      if (std::fseek(f, len - 2, SEEK_CUR) != 0) break;
    }
  }
  std::fclose(f);
  return ok && w > 0 && h > 0;
}

}  // namespace

ImageFolderDataset::ImageFolderDataset(const std::string& root, const ImageFolderOptions& opt)
    : opt_(opt) {
  if (opt.channels != 1 && opt.channels != 3)
    throw std::invalid_argument("image folder: channels must be 1 or 3, got " +
                                std::to_string(opt.channels));
  if (opt.height <= 0 || opt.width <= 0)
    throw std::invalid_argument("image folder: the input height and width must be set (got " +
                                std::to_string(opt.height) + "x" + std::to_string(opt.width) +
                                ")");
  if (opt.max_pixels == 0) throw std::invalid_argument("image folder: max_pixels must be > 0");
  opt.normalize.validate();

  std::error_code ec;
  if (!fs::is_directory(root, ec))
    throw std::runtime_error("image folder not found at " + root +
                             ": expected " + root + "/<class_name>/*.png|*.jpg|*.jpeg");
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.empty() && name[0] != '.' && e.is_directory()) classes_.push_back(name);
  }
  if (ec) throw std::runtime_error("cannot list image folder " + root + ": " + ec.message());
  if (classes_.empty())
    throw std::runtime_error("no class folders under " + root + ": expected " + root +
                             "/<class_name>/*.png|*.jpg|*.jpeg");
  std::sort(classes_.begin(), classes_.end());

  std::vector<std::string> names;
  for (size_t k = 0; k < classes_.size(); ++k) {
    const fs::path dir = fs::path(root) / classes_[k];
    names.clear();
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (!is_image_name(name) || e.is_directory()) continue;
      if (!e.is_regular_file())
        throw std::runtime_error((dir / name).string() +
                                 " is not a regular file (a FIFO, device or socket): not an image; remove it");
      names.push_back(name);
    }
    if (ec) throw std::runtime_error("cannot list " + dir.string() + ": " + ec.message());
    if (names.empty())
      throw std::runtime_error("class folder " + dir.string() +
                               " has no .png, .jpg or .jpeg images: remove it or add images");
    std::sort(names.begin(), names.end());
    for (const auto& n : names) {
      files_.push_back((dir / n).string());
      labels_.push_back(int32_t(k));
    }
  }
  files_.shrink_to_fit();
  labels_.shrink_to_fit();

  // What a decode will hold: the largest image's pixels, from the headers.
  for (const auto& f : files_) {
    uint64_t w = 0, h = 0;
    if (!probe_size(f, w, h)) {  // unknown: plan for the worst case
      largest_pixels_ = opt_.max_pixels;
      largest_side_ = kMaxImageSide;
      break;
    }
    largest_pixels_ = std::max(largest_pixels_, std::min<uint64_t>(w * h, opt_.max_pixels));
    largest_side_ = std::max<int>(largest_side_, int(std::min<uint64_t>(std::max(w, h), kMaxImageSide)));
  }
}

void ImageFolderDataset::get(size_t i, float* out_chw, int32_t* label) const {
  if (i >= files_.size())
    throw std::out_of_range("ImageFolderDataset: index " + std::to_string(i) + " >= size " +
                            std::to_string(files_.size()));
  DecodeRequest req;
  req.channels = opt_.channels;
  req.min_height = opt_.height;
  req.min_width = opt_.width;
  req.max_pixels = opt_.max_pixels;
  const Image8 img = decode_image(files_[i], req);
  resize_to_chw(img.pixels.data(), img.height, img.width, img.channels, opt_.height,
                opt_.width, opt_.channels, opt_.normalize, out_chw);
  *label = labels_[i];
}

float ImageFolderDataset::fill_value(int c) const {
  return -opt_.normalize.mean_at(c) / opt_.normalize.std_at(c);
}

size_t ImageFolderDataset::resident_bytes() const {
  size_t b = files_.capacity() * sizeof(std::string) + labels_.capacity() * sizeof(int32_t);
  for (const auto& f : files_) b += f.capacity() + 1;
  for (const auto& c : classes_) b += sizeof(std::string) + c.capacity() + 1;
  return b;
}

size_t ImageFolderDataset::transient_bytes() const {
  // Up to 4 bytes a pixel while the decoder converts (alpha, 16 bits), the
  // decoder's own row and table buffers, and what libjpeg may hold for a
  // progressive file of the largest image (its memory limit, set from the
  // same pixel count when decoding).
  constexpr size_t kDecoderState = 256 << 10;
  return size_t(largest_pixels_) * 4 + kDecoderState + size_t(jpeg_memory_limit(largest_pixels_)) +
         resize_scratch_bytes(largest_side_, 3, opt_.height, opt_.width);
}

}  // namespace memfit::data
