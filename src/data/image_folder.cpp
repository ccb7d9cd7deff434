#include "data/image_folder.hpp"

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
  return size_t(opt_.max_pixels) * 3 + size_t(jpeg_memory_limit(opt_.max_pixels)) + resize_scratch_bytes(kMaxImageSide, 3, opt_.height, opt_.width);
}

}  // namespace memfit::data
