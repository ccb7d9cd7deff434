// memfit data layer: the Dataset interface, a small in-memory dataset and a
// Subset view.
//
// A Dataset is a random-access list of samples, each a fixed list of named,
// typed tensors of fixed shapes (tensors(): "image" f32 [C, H, W] and
// "labels" i32 [] for images; "tokens" i32 [T] and a target for text).
// get_tensors(i) writes sample i's tensors into caller buffers; the loader
// calls it into its batch buffers, so an implementation must not keep
// references to them and must be safe to call concurrently from several
// threads (it is const and must not mutate shared state).
//
// Image datasets implement the image form instead: sample_shape() and
// get(i, float*, int32_t*), a normalised float32 CHW image and its class;
// the generic form defaults to it.
//
// Memory accounting (what the planner counts for "data pipeline"):
//   resident_bytes()   bytes the dataset holds for its whole life (decoded
//                      pixels, file lists, index tables).
//   transient_bytes()  upper bound on the extra bytes one get() may need
//                      while it runs (decode buffers); the loader multiplies
//                      it by its number of decoding threads.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "memfit/tensor_spec.hpp"

namespace memfit::data {

// C, H, W of one sample.
using SampleShape = std::array<int, 3>;

inline size_t sample_numel(const SampleShape& s) {
  return size_t(s[0]) * size_t(s[1]) * size_t(s[2]);
}

class Dataset {
 public:
  virtual ~Dataset() = default;

  virtual size_t size() const = 0;
  // Classes of a classification target; the vocabulary of a language
  // model's.
  virtual int num_classes() const = 0;

  // A dataset implements either the generic form (tensors, get_tensors) or
  // the image form (sample_shape, get); each defaults to the other.
  //
  // The tensors of one sample, in the order get_tensors() writes them; the
  // last is the target. Default: {"image", f32, sample_shape()},
  // {"labels", i32, [], pad -1}.
  virtual std::vector<TensorSpec> tensors() const;
  // Writes sample i (i < size()): out[k] receives tensors()[k]
  // (sample_bytes() bytes). Throws std::out_of_range for a bad index and
  // std::runtime_error naming the file for unreadable data. Thread-safe.
  // Default: get(i, out[0], out[1]).
  virtual void get_tensors(size_t i, void* const* out) const;
  // Sample i as the loader draws it in epoch `epoch`: a dataset whose
  // samples vary with the epoch (TokenWindows' random windows) overrides
  // it, as a pure function of (i, epoch) so that resume is exact. Default:
  // get_tensors(i, out).
  virtual void get_tensors_at(size_t i, uint64_t /*epoch*/, void* const* out) const { get_tensors(i, out); }

  // The image form. sample_shape(): C, H, W; get(): sample i as C*H*W
  // floats into out_chw and its class index (0 <= label < num_classes())
  // into *label, with the errors of get_tensors(). A dataset of other
  // tensors leaves them: they throw std::logic_error.
  virtual SampleShape sample_shape() const;
  virtual void get(size_t i, float* out_chw, int32_t* label) const;
  // True if tensors() is an image and a label (the loader's augmentations
  // and the image models need one).
  bool is_image() const;

  // Value of a black (all-zero) pixel of channel c after normalisation; used
  // as the fill of padded borders (random crop) so they look like black
  // padding of the raw image.
  virtual float fill_value(int /*c*/) const { return 0.0f; }

  // Class names in label order when the source has them (image folders);
  // empty otherwise.
  virtual std::vector<std::string> class_names() const { return {}; }

  virtual size_t resident_bytes() const = 0;
  virtual size_t transient_bytes() const { return 0; }
};

// Per-channel normalisation out = (pixel/255 - mean[c]) / stddev[c].
// Channels past the given count reuse the last value, so {m}, {s} works for
// any C.
struct Normalize {
  std::vector<float> mean{0.0f};
  std::vector<float> stddev{1.0f};

  float mean_at(int c) const;
  float std_at(int c) const;
  // Throws std::invalid_argument for an empty list or a stddev <= 0.
  void validate() const;
};

// Fashion-MNIST training-set statistics.
inline Normalize fashion_mnist_normalize() { return {{0.2860f}, {0.3530f}}; }

// A dataset held entirely in memory as floats (already normalised). Used by
// tests and by programs that build their data in code.
class MemoryDataset final : public Dataset {
 public:
  // data holds size*C*H*W floats in sample-major CHW order; labels holds size
  // entries in [0, num_classes). Throws std::invalid_argument on mismatch.
  MemoryDataset(std::vector<float> data, std::vector<int32_t> labels,
                SampleShape shape, int num_classes);

  size_t size() const override { return labels_.size(); }
  int num_classes() const override { return num_classes_; }
  SampleShape sample_shape() const override { return shape_; }
  void get(size_t i, float* out_chw, int32_t* label) const override;
  size_t resident_bytes() const override;

 private:
  std::vector<float> data_;
  std::vector<int32_t> labels_;
  SampleShape shape_;
  int num_classes_;
};

// How much of a dataset to train on: a count of samples or a fraction.
struct SubsetSpec {
  enum Kind : uint8_t { All, Count, Fraction } kind = All;
  size_t count = 0;       // Kind::Count
  double fraction = 1.0;  // Kind::Fraction, in (0, 1]
  bool random = true;     // seeded random selection; false = the first N

  // Number of samples selected from a dataset of n (at least 1 for a
  // fraction of a non-empty dataset). Throws std::invalid_argument when a
  // count exceeds n.
  size_t resolve(size_t n) const;
};

// Parses the command-line form: "2000" (count), "0.1" or "10%" (fraction),
// optionally prefixed "first:" for the first N instead of a random choice.
// A number with '.', 'e' or '%' is a fraction: "1" is one sample, "1.0" all.
// Throws std::invalid_argument with the text and the accepted forms.
SubsetSpec parse_subset(const std::string& text);

// A view of some samples of a base dataset, in increasing base-index order.
// Does not own the base, which must outlive it.
class Subset final : public Dataset {
 public:
  Subset(const Dataset& base, std::vector<size_t> indices);

  // The first n samples.
  static Subset first(const Dataset& base, size_t n);
  // n samples chosen uniformly without replacement, a pure function of
  // (seed, base.size(), n); kept in increasing index order.
  static Subset random(const Dataset& base, size_t n, uint64_t seed);
  static Subset from_spec(const Dataset& base, const SubsetSpec& spec, uint64_t seed);

  size_t size() const override { return indices_.size(); }
  int num_classes() const override { return base_->num_classes(); }
  SampleShape sample_shape() const override { return base_->sample_shape(); }
  void get(size_t i, float* out_chw, int32_t* label) const override;
  std::vector<TensorSpec> tensors() const override { return base_->tensors(); }
  void get_tensors(size_t i, void* const* out) const override;
  void get_tensors_at(size_t i, uint64_t epoch, void* const* out) const override;
  float fill_value(int c) const override { return base_->fill_value(c); }
  std::vector<std::string> class_names() const override { return base_->class_names(); }
  // The index table plus the base's resident bytes: a view keeps its base
  // alive, so whoever counts the view counts both.
  size_t resident_bytes() const override;
  size_t transient_bytes() const override { return base_->transient_bytes(); }

  const std::vector<size_t>& indices() const { return indices_; }

 private:
  const Dataset* base_;
  std::vector<size_t> indices_;
};

}  // namespace memfit::data
