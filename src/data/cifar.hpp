// CIFAR-10 and CIFAR-100 as their archives unpack (and torchvision keeps
// them under its `root`):
//   cifar-10-batches-py/   data_batch_1..5, test_batch, batches.meta
//                          (Python 2 pickles: a dict of 'data', a numpy
//                          uint8 array N x 3072, and 'labels', a list)
//   cifar-100-python/      train, test, meta ('fine_labels', 'coarse_labels')
//   cifar-10-batches-bin/  data_batch_1..5.bin, test_batch.bin,
//                          batches.meta.txt (records of 1 label byte +
//                          3072 pixel bytes)
//   cifar-100-binary/      train.bin, test.bin, fine_label_names.txt,
//                          coarse_label_names.txt (records of coarse label,
//                          fine label, 3072 pixel bytes)
// The pickles are read by data/pickle.hpp's bounded reader, which runs no
// pickle code. An image's 3072 bytes are its red, green and blue planes,
// 32 rows of 32 each: already C x H x W.
//
// CifarDataset keeps the pixels as uint8 (50000 images: 146.5 MiB) and the
// labels, and converts one image per get() through a 256-entry table per
// channel: out = (v/255 - mean[c]) / std[c], with the training set's
// per-channel statistics (cifar10_normalize(), cifar100_normalize()), as
// IdxDataset uses Fashion-MNIST's. get() never allocates.
//
// Every error is a std::runtime_error naming the file and the record index
// or byte offset: a missing or truncated file, a pickle of another
// structure, a label outside the classes, a record size that does not
// divide the file. Sizes are checked against the file's before anything is
// allocated.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.hpp"

namespace memfit::data {

inline constexpr size_t kCifarImageBytes = 3 * 32 * 32;

enum class CifarKind : uint8_t { Cifar10, Cifar100 };

struct CifarLayout {
  std::string dir;  // the folder holding the batch files
  CifarKind kind = CifarKind::Cifar10;
  bool binary = false;  // the -bin / -binary archives
  // "CIFAR-10 (python pickles)", "CIFAR-100 (binary)" ...
  std::string describe() const;
};

// The CIFAR folder at `data`: `data` itself (it holds data_batch_1,
// data_batch_1.bin, train.bin, or train and test files), or one of its
// subfolders as the archives unpack (cifar-10-batches-py, cifar-100-python,
// cifar-10-batches-bin, cifar-100-binary: torchvision's root). The python
// layout is taken before the binary one of the same dataset. nullopt when
// none is there; std::runtime_error when `data` holds both CIFAR-10 and
// CIFAR-100 (which one is meant is not known).
std::optional<CifarLayout> find_cifar(const std::string& data);

// The batch files of a split ("train": the data batches; "test": the test
// batch), in order. Throws std::runtime_error naming a missing one.
std::vector<std::string> cifar_files(const CifarLayout& layout, const std::string& split);

// The training set's per-channel mean and standard deviation of v/255
// (CIFAR-10: 0.4914 0.4822 0.4465 / 0.2470 0.2435 0.2616; CIFAR-100:
// 0.5071 0.4865 0.4409 / 0.2673 0.2564 0.2762).
Normalize cifar10_normalize();
Normalize cifar100_normalize();

// One batch file read whole: count x 3072 pixels, the labels (CIFAR-10's,
// or CIFAR-100's fine ones) and CIFAR-100's coarse labels, each checked
// against its number of classes. For tests and fuzzing; CifarDataset reads
// the files straight into one buffer.
struct CifarBatch {
  std::vector<uint8_t> pixels, labels, coarse;
  size_t size() const { return labels.size(); }
};
CifarBatch read_cifar_batch(const std::string& path, CifarKind kind, bool binary);

// The class names of the layout's meta file (batches.meta, meta,
// batches.meta.txt, fine/coarse_label_names.txt), fine or coarse; empty
// when the file is not there. Throws when it is there but is not a list of
// as many names as there are classes.
std::vector<std::string> read_cifar_class_names(const CifarLayout& layout, bool coarse);

struct CifarOptions {
  bool coarse = false;  // CIFAR-100: the 20 superclasses instead of the 100 classes
};

class CifarDataset final : public Dataset {
 public:
  // The split's files ("train" or "test") read into memory.
  static CifarDataset open(const CifarLayout& layout, const std::string& split, const CifarOptions& opt = {});

  size_t size() const override { return labels_.size(); }
  int num_classes() const override { return classes_; }
  SampleShape sample_shape() const override { return {3, 32, 32}; }
  void get(size_t i, float* out_chw, int32_t* label) const override;
  float fill_value(int c) const override;
  std::vector<std::string> class_names() const override { return names_; }
  // The uint8 pixels and labels, the tables, the class names; get() needs
  // nothing more (transient_bytes() is 0).
  size_t resident_bytes() const override;

  const uint8_t* image(size_t i) const { return pixels_.data() + i * kCifarImageBytes; }
  uint8_t label(size_t i) const { return labels_[i]; }

 private:
  CifarDataset() = default;
  std::vector<uint8_t> pixels_;
  std::vector<uint8_t> labels_;
  std::vector<std::string> names_;
  int classes_ = 10;
  float lut_[3][256] = {};
};

}  // namespace memfit::data
