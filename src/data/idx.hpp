// memfit IDX reader and the IdxDataset (MNIST, Fashion-MNIST, KMNIST ...).
//
// IDX files: big-endian magic 0x0000TTDD (TT element type, DD number of
// dimensions), DD big-endian uint32 dimensions, then the elements. memfit
// reads unsigned-byte images (magic 0x00000803: count, rows, cols) and
// unsigned-byte labels (0x00000801: count). Files may be gzip-compressed
// (.gz) or raw; the content decides, not the name. The header is never
// trusted: a raw file must be exactly as large as it declares, a gzip file
// must be able to hold it (at most 1032 decompressed bytes per compressed
// byte) and under 64 GiB, and the pixel buffer's pages are filled only as
// decompressed data arrives. A file holding less or more data than its
// header declares is rejected.
//
// Every error is a std::runtime_error naming the file and the problem; a
// missing file names the Debian package that provides it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.hpp"

namespace memfit::data {

// Where the Debian package dataset-fashion-mnist installs its files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct IdxImages {
  uint32_t count = 0, rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // count*rows*cols, row-major per image
};

IdxImages read_idx_images(const std::string& path);
std::vector<uint8_t> read_idx_labels(const std::string& path);

// The header of an IDX images file (magic and dimensions checked, nothing
// else read): a few bytes even through gzip. `pixels` stays empty.
IdxImages read_idx_images_header(const std::string& path);

// Writes the IDX images file at `path` (gzip or raw) to the open file
// descriptor `out_fd` as a raw IDX file (16-byte header, then the pixels),
// checking it exactly as read_idx_images does while holding only a small
// buffer. `out_name` names out_fd in write errors. Returns the header (no
// pixels). Throws std::runtime_error naming the file at fault.
IdxImages copy_idx_images(const std::string& path, int out_fd, const std::string& out_name);

// Big-endian uint32 at b (IDX headers).
inline uint32_t load_be32(const unsigned char* b) {
  return uint32_t(b[0]) << 24 | uint32_t(b[1]) << 16 | uint32_t(b[2]) << 8 | uint32_t(b[3]);
}
inline void store_be32(unsigned char* b, uint32_t v) {
  b[0] = uint8_t(v >> 24);
  b[1] = uint8_t(v >> 16);
  b[2] = uint8_t(v >> 8);
  b[3] = uint8_t(v);
}

// Writes n bytes to fd (retrying short writes); throws std::runtime_error
// "<name>: cannot write: <reason>" (a full disk names ENOSPC).
void write_all(int fd, const std::string& name, const void* data, size_t n);

// True when the file starts with the gzip magic bytes (1f 8b).
bool is_gzip_file(const std::string& path);

// The 256-entry table IDX datasets map a pixel byte through:
// lut[v] = (v/255 - mean[0]) / stddev[0], computed the same way everywhere so
// that in-memory and streamed datasets give bit-identical samples.
void idx_lut(const Normalize& n, float lut[256]);

// Path of "<dir>/<split>-<kind>-ubyte.gz", or without ".gz" when only that
// exists; kind is "images-idx3" or "labels-idx1". Throws the "dataset not
// found ... install dataset-fashion-mnist or pass --data DIR" error when
// neither exists.
std::string find_idx_file(const std::string& dir, const std::string& split,
                          const std::string& kind);

// Checks that every label is < num_classes, naming `source`, the first bad
// label and its index otherwise (std::runtime_error).
void check_idx_labels(const std::vector<uint8_t>& labels, int num_classes,
                      const std::string& source);

struct IdxOptions {
  Normalize normalize = fashion_mnist_normalize();
  int num_classes = 10;
};

// An images+labels IDX pair held in memory as decoded uint8 (60000 28x28
// images: 47 MB), converted to normalised float on get() through a 256-entry
// table. Samples are 1 x rows x cols. get() never allocates.
class IdxDataset final : public Dataset {
 public:
  // Opens "<dir>/<split>-images-idx3-ubyte[.gz]" and the matching labels;
  // split is "train" or "t10k" for the MNIST family.
  static IdxDataset open(const std::string& dir, const std::string& split,
                         const IdxOptions& opt = {});
  static IdxDataset open_files(const std::string& images_path, const std::string& labels_path,
                               const IdxOptions& opt = {});

  // Checks counts match and every label is < opt.num_classes; `source` names
  // the labels file in error messages.
  IdxDataset(IdxImages images, std::vector<uint8_t> labels, const IdxOptions& opt,
             const std::string& source);

  size_t size() const override { return labels_.size(); }
  int num_classes() const override { return num_classes_; }
  SampleShape sample_shape() const override { return {1, int(rows_), int(cols_)}; }
  void get(size_t i, float* out_chw, int32_t* label) const override;
  float fill_value(int c) const override;
  size_t resident_bytes() const override;

  // Raw access (for statistics and tests).
  const uint8_t* image(size_t i) const { return pixels_.data() + i * size_t(rows_) * cols_; }
  uint8_t label(size_t i) const { return labels_[i]; }

 private:
  uint32_t rows_ = 0, cols_ = 0;
  int num_classes_ = 10;
  std::vector<uint8_t> pixels_;
  std::vector<uint8_t> labels_;
  float lut_[256];
  float fill_;
};

}  // namespace memfit::data
