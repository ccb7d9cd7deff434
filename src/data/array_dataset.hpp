// Datasets over memory someone else owns (a notebook's numpy arrays and
// torch tensors, read in place) and over memfit's array cache file (a torch
// Dataset materialised once). The Python package builds them
// (python/src/memfit_module.cpp); nothing here knows Python.
//
// ArrayImages: images N x C x H x W described by element strides in bytes,
// so NCHW, NHWC (the strides permuted) and non-contiguous views are all
// read where they lie, without a copy. uint8 pixels are normalised per
// sample in get() through a 256-entry table per channel, with the formula
// of IdxDataset and CifarDataset (out = (v/255 - mean[c]) / std[c]), so the
// same pixels and statistics give bit-identical samples; float32 pixels are
// used as given. Labels: int32 or int64, one per image.
//
// ArrayTokens: token ids N x T (int32 or int64) and labels, the tensors
// TokenizedTexts gives the text classifiers (tokens, attention_mask,
// lengths, labels): an example's length is T less its trailing pad ids.
//
// ArrayFileDataset: the cache file below, read one sample per pread (as
// StreamedIdxDataset reads its raw cache: the pixels never resident; the
// labels are).
//
// Memory: the arrays are the caller's, already resident in the process, so
// resident_bytes() counts them (the plan subtracts every dataset's resident
// bytes from the measured baseline and shows them in the data row: they are
// shown once, never counted twice) and in_process_bytes() says how much of
// that is the caller's.
//
// Every check names the sample: a label outside [0, classes), a NaN or inf
// in a float image (the constructor scans them once), counts that differ,
// throwing DataError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/dataset.hpp"

namespace memfit::data {

// Bad data from the caller (the Python package raises memfit.DataError).
struct DataError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

enum class ElemType : uint8_t { U8, F32, I32, I64 };
size_t elem_size(ElemType t);
const char* elem_name(ElemType t);

// A strided view of memory the caller keeps alive (keep_alive is released
// when the last dataset using it goes).
struct ArrayView {
  const std::byte* data = nullptr;
  ElemType type = ElemType::U8;
  std::vector<int64_t> shape;    // elements per axis
  std::vector<int64_t> strides;  // bytes per step along each axis (may be negative)
  std::shared_ptr<const void> keep_alive;
  size_t bytes() const;          // the elements' bytes (numel x size)
};

// A dataset whose samples live in the caller's memory or in a cache file the
// caller made: note() is the plan's data-row text for it.
class ExternalDataset : public Dataset {
 public:
  virtual std::string note() const = 0;
  // Bytes of the caller's memory the dataset reads in place (0 for a file).
  virtual size_t in_process_bytes() const { return 0; }
  // The file samples are read from ("" when in memory).
  virtual std::string file() const { return ""; }
};

// The per-channel tables of uint8 pixels: lut[c][v] = (v/255 - mean[c]) / std[c].
void channel_luts(const Normalize& n, int channels, std::vector<float>& lut);

class ArrayImages final : public ExternalDataset {
 public:
  // images: 4 axes in N, C, H, W order (strides already permuted for NHWC);
  // U8 or F32. labels: 1 axis of N, I32 or I64. classes > every label.
  // normalize: for U8 (ignored for F32). Throws DataError naming the index.
  ArrayImages(ArrayView images, ArrayView labels, int classes, const Normalize& normalize, std::string note);

  size_t size() const override { return n_; }
  int num_classes() const override { return classes_; }
  SampleShape sample_shape() const override { return shape_; }
  void get(size_t i, float* out_chw, int32_t* label) const override;
  float fill_value(int c) const override;
  size_t resident_bytes() const override { return images_.bytes() + labels_.bytes() + lut_.capacity() * sizeof(float); }
  size_t in_process_bytes() const override { return images_.bytes() + labels_.bytes(); }
  std::string note() const override { return note_; }

 private:
  ArrayView images_, labels_;
  size_t n_ = 0;
  SampleShape shape_{};
  int classes_ = 0;
  std::vector<float> lut_;  // U8: C x 256
  std::string note_;
};

class ArrayTokens final : public ExternalDataset {
 public:
  // tokens: N x T, I32 or I64, each id in [0, vocab); labels as ArrayImages.
  // mask (optional): N x T, U8, I32 or I64, an attention mask as tokenizers
  // make it: 1 for each of the example's tokens, then 0 for its padding. It
  // gives the lengths (its ones) in place of trailing pad ids; a mask with a
  // 0 before a 1 (left padding), a value other than 0 and 1, or no 1 at all
  // is refused naming the index.
  ArrayTokens(ArrayView tokens, ArrayView labels, int classes, int64_t vocab, int32_t pad_id, std::string note,
              std::optional<ArrayView> mask = std::nullopt);

  size_t size() const override { return n_; }
  int num_classes() const override { return classes_; }
  std::vector<TensorSpec> tensors() const override;
  void get_tensors(size_t i, void* const* out) const override;
  size_t resident_bytes() const override { return tokens_.bytes() + labels_.bytes() + (mask_ ? mask_->bytes() : 0); }
  size_t in_process_bytes() const override { return resident_bytes(); }
  std::string note() const override { return note_; }

 private:
  int64_t length(size_t i) const;  // example i's tokens
  ArrayView tokens_, labels_;
  std::optional<ArrayView> mask_;
  size_t n_ = 0;
  int64_t t_ = 0, vocab_ = 0;
  int classes_ = 0;
  int32_t pad_ = 0;
  std::string note_;
};

// memfit's array cache file (version 1, little-endian):
//   0   "MFARRAY" + NUL      8 bytes
//   8   u32 version (1)      12  u32 element type (0 u8, 1 f32)
//   16  u32 C, H, W          28  u32 classes
//   32  u64 count            40  u64 labels offset (int32 x count)
//   48  u64 data offset      56  u64 file size
//   64  32 bytes: the source's fingerprint
//   96  f32 mean[C], f32 std[C] (the normalisation of u8 pixels)
// then the labels, then count samples of C x H x W elements, CHW order.
// Written by the Python package (memfit/_torch_data.py) atomically.
inline constexpr char kArrayFileMagic[8] = {'M', 'F', 'A', 'R', 'R', 'A', 'Y', '\0'};
inline constexpr uint32_t kArrayFileVersion = 1;

class ArrayFileDataset final : public ExternalDataset {
 public:
  // Opens and checks the file (magic, version, sizes against the file's,
  // every label); throws std::runtime_error naming the path and what is
  // wrong (the file's fault, as every reader of memfit's files does).
  static std::shared_ptr<ArrayFileDataset> open(const std::string& path, std::string note);
  ~ArrayFileDataset() override;
  ArrayFileDataset(const ArrayFileDataset&) = delete;
  ArrayFileDataset& operator=(const ArrayFileDataset&) = delete;

  size_t size() const override { return labels_.size(); }
  int num_classes() const override { return classes_; }
  SampleShape sample_shape() const override { return shape_; }
  // f32: one pread straight into out_chw; u8: preads of kChunk bytes into
  // a stack buffer, through the tables. Never allocates.
  void get(size_t i, float* out_chw, int32_t* label) const override;
  float fill_value(int c) const override;
  size_t resident_bytes() const override;
  size_t transient_bytes() const override;
  std::string note() const override { return note_; }
  std::string file() const override { return path_; }
  // The fingerprint in the header, 64 hex digits.
  const std::string& fingerprint() const { return fingerprint_; }
  ElemType type() const { return type_; }

  static constexpr size_t kChunk = size_t(1) << 14;

 private:
  ArrayFileDataset() = default;
  std::string path_, note_, fingerprint_;
  int fd_ = -1;
  ElemType type_ = ElemType::U8;
  SampleShape shape_{};
  int classes_ = 0;
  uint64_t data_offset_ = 0;
  std::vector<int32_t> labels_;
  std::vector<float> lut_;
};

}  // namespace memfit::data
