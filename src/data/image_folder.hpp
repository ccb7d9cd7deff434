// memfit ImageFolderDataset: root/<class_name>/<image>.png|.jpg|.jpeg.
//
// Classes are the sub-folders of root sorted by name (byte order); label k is
// the k-th. Files in a class are sorted by name; other files and names
// starting with '.' are ignored. Only the file list is held in memory: each
// get() decodes its file, converts it to the requested channels and resizes
// it to height x width (see data/image.hpp), so memory does not grow with
// the number or size of images beyond one decoded image per decoding thread,
// bounded by transient_bytes().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.hpp"

namespace memfit::data {

struct ImageFolderOptions {
  int channels = 3;          // 1 = grayscale (luma), 3 = RGB
  int height = 0, width = 0; // the model's input size; required
  Normalize normalize{};     // default: pixels in [0, 1]
  uint64_t max_pixels = 1ull << 25;  // refuse decoding larger images
};

class ImageFolderDataset final : public Dataset {
 public:
  // Scans root. Throws std::runtime_error when root is missing, has no class
  // folders, or a class folder has no images; std::invalid_argument for bad
  // options.
  ImageFolderDataset(const std::string& root, const ImageFolderOptions& opt);

  size_t size() const override { return files_.size(); }
  int num_classes() const override { return int(classes_.size()); }
  SampleShape sample_shape() const override { return {opt_.channels, opt_.height, opt_.width}; }
  // Decodes and resizes file i; allocates the decoded image while it runs.
  void get(size_t i, float* out_chw, int32_t* label) const override;
  float fill_value(int c) const override;
  std::vector<std::string> class_names() const override { return classes_; }
  size_t resident_bytes() const override;
  // One decoded image as large as the largest in the folder (its header,
  // read when the folder is scanned; the pixel limit when one cannot be
  // read) plus the decoder's state and the resize rows.
  size_t transient_bytes() const override;

  const std::string& path(size_t i) const { return files_[i]; }
  int32_t label(size_t i) const { return labels_[i]; }

 private:
  ImageFolderOptions opt_;
  std::vector<std::string> classes_;
  std::vector<std::string> files_;
  std::vector<int32_t> labels_;
  uint64_t largest_pixels_ = 0;  // of the largest image found by the scan
  int largest_side_ = 0;
};

}  // namespace memfit::data
